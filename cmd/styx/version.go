package main

import (
	"runtime/debug"
	"strings"
)

// version is the release version, set at link time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/styx
//
// (`make build` sets it from `git describe`). Empty means buildVersion reads
// it from the binary's build information.
var version = ""

// buildVersion returns the version `styx --version` prints: the link-time
// version if set; else the module version Go stamped into the binary (a tag
// or pseudo-version for `go install …@version`, "(devel)" for a build in a
// clone), followed by the VCS revision and "+dirty" when Go recorded them;
// "unknown" without build information.
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		v += " " + rev[:min(12, len(rev))]
		if dirty {
			v += "+dirty"
		}
	}
	return v + " " + bi.GoVersion
}
