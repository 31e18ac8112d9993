package web_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMELinksStayInTheRepository (issue 28, 9): the README links only
// to files of the repository (its screenshots and docs), never to another
// site, so that it reads the same offline and in a mirror.
func TestREADMELinksStayInTheRepository(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	links := regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(string(b), -1)
	require.NotEmpty(t, links)
	for _, l := range links {
		require.NotRegexp(t, `^[a-z]+:`, l[1], "the README links outside the repository: %s", l[0])
		if p := regexp.MustCompile(`#.*$`).ReplaceAllString(l[1], ""); p != "" {
			_, err := os.Stat("../" + p)
			require.NoError(t, err, "the README links to a file the repository does not have: %s", l[0])
		}
	}
}

// TestREADMEFindOneItemOnItsOwnQueues (issue 49, 8): the walk-through's
// "Find one item, fix it" step works on queues it makes itself, not on
// payments-dead, which the step before it deletes; the walk-through script
// runs the same commands.
func TestREADMEFindOneItemOnItsOwnQueues(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	s := string(b)
	start := strings.Index(s, "### Find one item, fix it")
	require.GreaterOrEqual(t, start, 0)
	retire := strings.Index(s, "$ styx queues delete payments-dead")
	require.True(t, retire >= 0 && retire < start, "the retirement step comes first")
	section := s[start:]
	section = section[:strings.Index(section, "\n## ")]
	commands := regexp.MustCompile(`(?m)^\$ (.*)$`).FindAllStringSubmatch(section, -1)
	require.NotEmpty(t, commands)
	created := map[string]bool{}
	for _, c := range commands {
		if m := regexp.MustCompile(`^styx queues create (\S+)`).FindStringSubmatch(c[1]); m != nil {
			created[m[1]] = true
			continue
		}
		m := regexp.MustCompile(`styx (?:dead \w+|produce|lease|retry|queues history|activity) (\S+)`).FindStringSubmatch(c[1])
		require.NotNil(t, m, "a command of the section: %s", c[1])
		require.True(t, created[m[1]], "%q uses queue %s, which the section has not created (the step before deleted payments-dead)", c[1], m[1])
	}
	script, err := os.ReadFile("../scripts/walkthrough.sh")
	require.NoError(t, err)
	require.Contains(t, string(script), `run "styx dead list billing-dead --reference order-A-17"`, "the walk-through script runs the step")
}
