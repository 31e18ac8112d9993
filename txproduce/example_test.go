package txproduce_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/styxq/styx/txproduce"
)

// An order and the item that announces it commit together: a consumer
// leases the item only once the order is in the table, and never when the
// transaction rolls back.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/shop") // the database Styx uses
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, "o-1042", 99.5); err != nil {
			return err
		}
		ids, err := txproduce.Producer{Schema: "styx"}.Produce(ctx, tx, "orders.created", []txproduce.Item{{
			Payload:         []byte(`{"order_id":"o-1042"}`),
			Kind:            "order.created",
			Reference:       "o-1042",
			DeduplicationID: "order-o-1042",
		}})
		if err != nil {
			return err
		}
		log.Printf("order o-1042 announced as item %s", ids[0])
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
