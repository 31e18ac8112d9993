package metrics_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestAlertsMatchDocs reads the alerting rules (deploy/prometheus/alerts.yaml)
// and their reference (docs/metrics.md, the "Alerts" table) and checks that
// both list the same alerts with the same `for:` duration, so the docs cannot
// drift from the rules again.
func TestAlertsMatchDocs(t *testing.T) {
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	inYAML := map[string]time.Duration{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue // a recording rule
			}
			var d time.Duration
			if r.For != "" {
				d, err = time.ParseDuration(r.For)
				require.NoError(t, err, "alerts.yaml: %s: for: %q", r.Alert, r.For)
			}
			inYAML[r.Alert] = d
		}
	}
	require.NotEmpty(t, inYAML)

	doc, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	// | `StyxName` | severity | `5m` or none | fires when |
	row := regexp.MustCompile("(?m)^\\| `(Styx\\w+)` \\| \\w+ \\| (`[^`]+`|none) \\|")
	inDocs := map[string]time.Duration{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var d time.Duration
		if m[2] != "none" {
			d, err = time.ParseDuration(strings.Trim(m[2], "`"))
			require.NoError(t, err, "docs/metrics.md: %s: for %s", m[1], m[2])
		}
		inDocs[m[1]] = d
	}
	require.Equal(t, inYAML, inDocs, "alert -> for: alerts.yaml (expected) vs docs/metrics.md (actual)")
}
