package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

func (a *app) keysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and delete API keys (server run with --auth; admin key)",
		Long: `Manage the API keys of a server run with --auth. These calls need a key with
the admin scope and no queue patterns, such as the --admin-key-file key.

Scopes: produce (queue.produce), consume (lease, complete, retry, renew),
dead (dead.* and redrives.*), read (stats, info, list, items list, /metrics),
admin (everything, keys included). --queue limits a key to queues whose
names match a pattern, where '*' matches any run of characters.`,
	}
	cmd.AddCommand(a.keysCreateCmd(), a.keysListCmd(), a.keysDeleteCmd())
	return a.addClientFlags(cmd)
}

func (a *app) keysCreateCmd() *cobra.Command {
	var scopes, queues []string
	cmd := &cobra.Command{
		Use:   "create NAME --scope SCOPE[,SCOPE] [--queue PATTERN]...",
		Short: "Create a key and print its secret (shown only this once)",
		Example: `  styx keys create orders-worker --scope produce,consume --queue 'orders*'
  styx keys create oncall --scope dead,read`,
		Args: exactArgs(1, "a key NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(scopes) == 0 {
				return fmt.Errorf("--scope is required: one or more of produce, consume, dead, read, admin")
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				res, err := c.KeysCreate(cmd.Context(), &pb.KeysCreateRequest{Name: args[0], Scopes: scopes, Queues: queues})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, res)
				}
				tw := newTable(a.stdout)
				tw.row("name", res.Name)
				tw.row("scopes", strings.Join(res.Scopes, ","))
				tw.row("queues", queueList(res.Queues))
				tw.row("key", res.Key)
				if err := tw.flush(); err != nil {
					return err
				}
				_, _ = fmt.Fprintln(a.stderr, "Store the key now: the server keeps only its hash and cannot show it again.")
				return nil
			})
		},
	}
	cmd.Flags().StringSliceVar(&scopes, "scope", nil, "scopes, comma-separated or repeated: produce, consume, dead, read, admin")
	cmd.Flags().StringArrayVar(&queues, "queue", nil, "queue-name pattern the key is limited to ('*' matches any run of characters); repeat for more; none: every queue")
	return cmd
}

// queueList shows a key's queue patterns; none means every queue.
func queueList(q []string) string {
	if len(q) == 0 {
		return "*"
	}
	return strings.Join(q, ",")
}

func (a *app) keysListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the keys, without their secrets",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				res, err := c.KeysList(cmd.Context(), &pb.KeysListRequest{})
				if err != nil {
					return err
				}
				if a.json {
					for _, k := range res.Keys {
						if err := writeJSON(a.stdout, k); err != nil {
							return err
						}
					}
					return nil
				}
				tw := newTable(a.stdout, "NAME", "SCOPES", "QUEUES", "CREATED", "CREATED BY")
				for _, k := range res.Keys {
					tw.row(k.Name, strings.Join(k.Scopes, ","), queueList(k.Queues), relative(a.now(), k.CreatedAt), orDash(k.CreatedBy))
				}
				return tw.flush()
			})
		},
	}
}

func (a *app) keysDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a key: requests with it are refused (401) at once, on every node",
		Args:  exactArgs(1, "a key NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				if err := c.KeysDelete(cmd.Context(), &pb.KeysDeleteRequest{Name: args[0]}); err != nil {
					return err
				}
				return a.done("deleted key %s", args[0])
			})
		},
	}
}
