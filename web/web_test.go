package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/web"
)

// Every page path answers index.html; assets answer themselves; the UI is
// read-only HTTP (GET, HEAD) with a Content Security Policy that allows
// only its own files.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	t.Cleanup(srv.Close)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}
	for _, path := range []string{"/ui/", "/ui/queues/orders", "/ui/queues/orders-dlq/dead", "/ui/queues/a%2Fb/dead/33lap8oac9c8u", "/ui/redrives"} {
		res, body := get(path)
		assert.Equal(t, http.StatusOK, res.StatusCode, path)
		assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), path)
		assert.Contains(t, body, `<script src="/ui/assets/app.js" defer></script>`, path)
		csp := res.Header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'none'", path)
		assert.Contains(t, csp, "script-src 'self'", path)
		assert.Contains(t, csp, "connect-src 'self'", path)
	}
	res, body := get("/ui/assets/core.js")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript"), res.Header.Get("Content-Type"))
	assert.Contains(t, body, "async function api(")
	res, body = get("/ui/assets/app.js")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, "function route(")
	res, _ = get("/ui/assets/style.css")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, res.Header.Get("Content-Type"), "text/css")
	res, _ = get("/ui/assets/nope.js")
	assert.Equal(t, http.StatusNotFound, res.StatusCode)

	post, err := http.Post(srv.URL+"/ui/", "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	post.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, post.StatusCode)
	assert.Equal(t, "GET, HEAD", post.Header.Get("Allow"))
}

// The UI's scripts fetch nothing from another origin: every URL they name
// is a path of this server. index.html loads every script under static/
// (one file per page or concern, issue 50), and each is checked.
func TestNoExternalURLs(t *testing.T) {
	index, err := os.ReadFile("static/index.html")
	require.NoError(t, err)
	var scripts []string
	for _, m := range regexp.MustCompile(`<script src="/ui/assets/([\w.-]+\.js)" defer></script>`).FindAllSubmatch(index, -1) {
		scripts = append(scripts, string(m[1]))
	}
	files, err := filepath.Glob("static/*.js")
	require.NoError(t, err)
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	assert.ElementsMatch(t, files, scripts, "index.html loads every script under static/, once")
	paths := []string{"/ui/", "/ui/assets/style.css"}
	for _, s := range scripts {
		paths = append(paths, "/ui/assets/"+s)
	}
	for _, path := range paths {
		rec := httptest.NewRecorder()
		web.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body := rec.Body.String()
		for _, scheme := range []string{"http://", "https://", "//cdn", "@import"} {
			assert.NotContains(t, body, scheme, "%s refers to %s", path, scheme)
		}
	}
}
