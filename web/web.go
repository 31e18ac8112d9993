// Package web is Styx's web UI: plain HTML, CSS and the project's own
// JavaScript, embedded in the binary (embed.FS) and served by `styx server`
// at /ui/. Nothing is fetched from elsewhere at run time and there is no
// build step: the files under static/ are what the browser gets.
//
// The UI is a client of the public API only: every action goes through the
// same /v1 calls as the CLI (queues.list, queues.info, queue.stats,
// queues.history, storage/items.list, dead.groups, dead.list, dead.redrive,
// dead.delete, dead.edit, redrives.list, redrives.get, redrives.cancel),
// from one JavaScript function (api in core.js) that adds
// "Authorization: Bearer <key>" when the user has given an API key, and
// asks for one when a call answers 401.
//
// Pages are deep links a person can bookmark and share; each serves the
// same index.html, and app.js renders the page the path names:
//
//	/ui/                          every queue: counts, oldest item, DLQ, running redrives
//	/ui/queues/{name}             a queue's configuration, partitions and stats
//	/ui/queues/{name}/items       a queue's items, read-only, a partition at a time
//	/ui/queues/{name}/dead        a DLQ: error groups, then items with filters
//	/ui/queues/{name}/dead/{id}   one dead item: payload, metadata, error history
//	/ui/redrives                  redrive tasks with live progress
//	/ui/redrives/{id}             one redrive task: progress, duration, ETA, results by queue
//
// Every page redraws itself every 2 s (1 s while a redrive runs) unless a
// dialog is open, a field has the keyboard or the user paused it; a section
// whose call fails (a scope the key lacks) shows a note, the rest renders.
// Charts are SVG drawn by charts.js from queues.history.
//
// The scripts are one file per concern, loaded in order by index.html's
// script tags (no modules, no bundler): core.js (window.styx: api, the
// dialogs, h() and the formats), the helpers livequeue.js, redrive.js and
// activity.js, then charts.js, deadactions.js (the redrive and delete
// flows), one file per group of pages (queues.js, dead.js, items.js,
// redrivetasks.js), each adding its pages to window.styx, and app.js last:
// the router and the live updates, which start the UI.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is the path the UI is served under.
const Prefix = "/ui/"

// Handler serves the UI under Prefix: /ui/assets/* are the static files,
// every other path under /ui/ is index.html (app.js renders the page the
// path names). Only GET and HEAD are allowed. Responses carry a Content
// Security Policy that allows the UI's own scripts, styles and API calls
// only.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic(err)
	}
	assets := http.StripPrefix(Prefix+"assets/", http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "only GET and HEAD are allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(r.URL.Path, Prefix+"assets/") {
			h.Set("Cache-Control", "no-cache")
			assets.ServeHTTP(w, r)
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	})
}
