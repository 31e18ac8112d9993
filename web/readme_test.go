package web_test

import (
	"os"
	"regexp"
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
