package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Durability is what the database's settings make an acknowledgement worth,
// as a node reads them at start (a setting changed later is not seen until
// the node restarts).
type Durability struct {
	// SynchronousCommit is the node's sessions' synchronous_commit (off,
	// local, remote_write, on or remote_apply; the URL may set it with
	// options=-c synchronous_commit=…).
	SynchronousCommit string
	// StandbyNames is synchronous_standby_names; "" means no commit waits
	// for a standby.
	StandbyNames string
	// Standbys is how many standbys stream from the database
	// (pg_stat_replication rows).
	Standbys int
}

// Guarantee says, in one sentence, what an acknowledged item survives
// under d and, with synchronous standbys, which standby to promote to keep
// it: with priority (FIRST n, or a plain list) a synchronous one, with a
// quorum (ANY n of more than n) only the most caught up. weak says whether
// that falls short of surviving the loss of the primary while standbys
// exist or of surviving a crash of PostgreSQL (logged as a warning).
func (d Durability) Guarantee() (text string, weak bool) {
	switch {
	case d.SynchronousCommit == "off":
		return "an acknowledged item may be lost by a crash of PostgreSQL (synchronous_commit = off: its last commits are not flushed yet), and by a failover", true
	case d.waits():
		return d.synchronous(), false
	case d.Standbys > 0:
		return "an acknowledged item is flushed on the primary only: replication is asynchronous, so a failover may lose the last acknowledged items (list the standby in synchronous_standby_names)", true
	default:
		return "an acknowledged item is flushed on the primary; no standby streams from it (losing the primary's disk loses what a backup does not hold)", false
	}
}

// waits says whether a commit of the node waits for standbys: some are
// listed and synchronous_commit is on, remote_write or remote_apply.
func (d Durability) waits() bool {
	return d.StandbyNames != "" && d.SynchronousCommit != "local" && d.SynchronousCommit != "off"
}

// StandbysRequired is how many synchronous standbys each commit of the node
// waits for (synchronous_standby_names' n); 0 when commits wait for none
// (no standby listed, or synchronous_commit local or off).
func (d Durability) StandbysRequired() int {
	if !d.waits() {
		return 0
	}
	s, err := ParseStandbyNames(d.StandbyNames)
	if err != nil {
		return 1 // at least one: PostgreSQL accepted the value
	}
	return s.Num
}

// synchronous is Guarantee's sentence when commits wait for standbys.
func (d Durability) synchronous() string {
	on := "flushed on the primary and on"
	switch d.SynchronousCommit {
	case "remote_write":
		on = "flushed on the primary and written (not yet flushed) on"
	case "remote_apply":
		on = "flushed on the primary and flushed and applied on"
	}
	var unless string
	if d.SynchronousCommit == "remote_write" {
		unless = " (synchronous_commit = remote_write), unless the standby's host crashes too"
	}
	s, err := ParseStandbyNames(d.StandbyNames)
	if err != nil { // PostgreSQL accepted it, so this is a bug of the parser
		return fmt.Sprintf("an acknowledged item is %s the synchronous standbys synchronous_standby_names = '%s' asks for (%v): promote the standby whose pg_last_wal_receive_lsn() is the highest%s",
			on, d.StandbyNames, err, unless)
	}
	switch {
	case s.Quorum && !s.Every():
		return fmt.Sprintf("an acknowledged item is %s %s of the standbys listed in synchronous_standby_names = '%s' (quorum commit), not on each: it survives the loss of the primary only when the most caught-up listed standby is promoted (the highest pg_last_wal_receive_lsn(), checked on each); another may lack acknowledged items%s",
			on, plural(s.Num, "any one", "any %d"), d.StandbyNames, unless)
	case s.Quorum:
		return fmt.Sprintf("an acknowledged item is %s every standby listed in synchronous_standby_names = '%s': it survives the loss of the primary when any of them is promoted%s",
			on, d.StandbyNames, unless)
	default:
		return fmt.Sprintf("an acknowledged item is %s %s (synchronous_standby_names = '%s', priority: %s streaming): it survives the loss of the primary when a synchronous standby is promoted (sync_state 'sync' in pg_stat_replication, not 'potential')%s",
			on, plural(s.Num, "a synchronous standby", "%d synchronous standbys"), d.StandbyNames, plural(s.Num, "the first listed standby", "the first %d listed standbys"), unless)
	}
}

// plural is one when n is 1, else many with n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

// StandbyNames is synchronous_standby_names parsed: which standbys a commit
// waits for (PostgreSQL's "Synchronous Replication" settings).
type StandbyNames struct {
	// Quorum is set for ANY n (…): a commit waits for any Num of Names
	// (quorum commit), so one listed standby may lack an acknowledged
	// commit that others have. Otherwise (FIRST n (…), n (…), or a plain
	// list, which is FIRST 1) a commit waits for the first Num listed
	// standbys that stream (priority): those pg_stat_replication shows as
	// sync_state 'sync', the others 'potential'.
	Quorum bool
	// Num is how many standbys a commit waits for; 0 when Names is empty
	// (synchronous_standby_names = '': no commit waits).
	Num int
	// Names are the listed standbys' application_name, in order, as
	// written (unquoted); "*" stands for any standby.
	Names []string
}

// Every says whether a commit waits for every listed standby (Num is at
// least the number of Names, none of them "*"): with a quorum, any of
// them may then be promoted.
func (s StandbyNames) Every() bool {
	for _, n := range s.Names {
		if n == "*" {
			return false
		}
	}
	return s.Num > 0 && s.Num >= len(s.Names)
}

// Method is "ANY" for a quorum, "FIRST" for priority, "" when no commit
// waits.
func (s StandbyNames) Method() string {
	switch {
	case s.Num == 0:
		return ""
	case s.Quorum:
		return "ANY"
	default:
		return "FIRST"
	}
}

// ParseStandbyNames parses a synchronous_standby_names value by
// PostgreSQL's grammar: an empty value (no commit waits), a list 's1, s2'
// (FIRST 1), 'n (list)' or 'FIRST n (list)' (priority), 'ANY n (list)'
// (quorum). Names may be
// double-quoted ("" is a quote inside); keywords are case-insensitive.
// Returns an error naming what it could not read.
func ParseStandbyNames(value string) (StandbyNames, error) {
	toks, err := standbyTokens(value)
	if err != nil || len(toks) == 0 {
		return StandbyNames{}, err
	}
	bad := func(why string) (StandbyNames, error) {
		return StandbyNames{}, fmt.Errorf("synchronous_standby_names %q: %s", value, why)
	}
	s := StandbyNames{Num: 1}
	list := toks
	word := func(t standbyToken, w string) bool { return !t.quoted && strings.EqualFold(t.text, w) }
	isNum := func(t standbyToken) bool {
		_, err := strconv.Atoi(t.text)
		return !t.quoted && err == nil
	}
	switch {
	case word(toks[0], "ANY") || word(toks[0], "FIRST"):
		s.Quorum = word(toks[0], "ANY")
		if len(toks) < 2 || !isNum(toks[1]) {
			return bad(toks[0].text + " must be followed by a number")
		}
		s.Num, _ = strconv.Atoi(toks[1].text)
		list = toks[2:]
	case isNum(toks[0]) && len(toks) > 1 && toks[1].punct == '(':
		s.Num, _ = strconv.Atoi(toks[0].text)
		list = toks[1:]
	}
	if len(list) != len(toks) { // n (list): parenthesised
		if len(list) < 2 || list[0].punct != '(' || list[len(list)-1].punct != ')' {
			return bad("the list of standbys must be in parentheses")
		}
		list = list[1 : len(list)-1]
	}
	if s.Num <= 0 {
		return bad("the number of synchronous standbys must be at least 1")
	}
	for i, t := range list {
		if (i%2 == 1) != (t.punct == ',') || (t.punct != 0 && t.punct != ',') {
			return bad("expected a comma-separated list of standby names")
		}
		if i%2 == 0 {
			if word(t, "ANY") || word(t, "FIRST") {
				return bad(t.text + " is a keyword: double-quote it to name a standby")
			}
			s.Names = append(s.Names, t.text)
		}
	}
	if len(list)%2 == 0 {
		return bad("expected a comma-separated list of standby names")
	}
	return s, nil
}

// standbyToken is a name, number or keyword (text), or punctuation: '(',
// ')' or ','.
type standbyToken struct {
	text   string
	quoted bool
	punct  byte
}

func standbyTokens(s string) ([]standbyToken, error) {
	var toks []standbyToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == ',':
			toks = append(toks, standbyToken{punct: c})
			i++
		case c == '"':
			var b strings.Builder
			for i++; ; i++ {
				if i >= len(s) {
					return nil, fmt.Errorf("synchronous_standby_names %q: unterminated quoted name", s)
				}
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
			}
			toks = append(toks, standbyToken{text: b.String(), quoted: true})
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r(),\"", rune(s[j])) {
				j++
			}
			toks = append(toks, standbyToken{text: s[i:j]})
			i = j
		}
	}
	return toks, nil
}

// readDurability reads d's settings on one of the pool's connections.
func readDurability(ctx context.Context, pool *pgxpool.Pool) (Durability, error) {
	var d Durability
	err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
		(SELECT count(*) FROM pg_stat_replication)`).Scan(&d.SynchronousCommit, &d.StandbyNames, &d.Standbys)
	d.StandbyNames = strings.TrimSpace(d.StandbyNames)
	if err != nil {
		return d, wrap("read the durability settings", err)
	}
	return d, nil
}

// logDurability logs what an acknowledgement is worth on the database
// (docs/storage/postgres.md, "High availability"): a warning when it may
// be lost by a failover or a crash, information otherwise (log may be
// nil). A failure to read the settings is logged and otherwise ignored.
func logDurability(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) Durability {
	d, err := readDurability(ctx, pool)
	if log == nil {
		return d
	}
	if err != nil {
		log.Warn("postgres: could not read the durability settings", "error", err)
		return d
	}
	d.log(ctx, log, "postgres: ")
	return d
}

// log logs d's guarantee at INFO, or WARN when it is weak, after prefix,
// with the settings behind it.
func (d Durability) log(ctx context.Context, log *slog.Logger, prefix string) {
	text, weak := d.Guarantee()
	level := slog.LevelInfo
	if weak {
		level = slog.LevelWarn
	}
	s, _ := ParseStandbyNames(d.StandbyNames)
	log.Log(ctx, level, prefix+text, "synchronous_commit", d.SynchronousCommit,
		"synchronous_standby_names", d.StandbyNames, "standby_method", s.Method(), "standbys_required", d.StandbysRequired(),
		"standbys", d.Standbys)
}
