// Command formsite is the CDP test's site, run inside a docker machine
// (a container reaches nothing of the host's loopback, so the site lives on
// its own; see apps/worker/cdp_test.go). Tests only. GET /signin signs the
// browser in (an HttpOnly cookie "session"); GET /form is a form whose
// POST /submit is recorded, with the session cookie it carried, as one
// JSON line in -state/posts; every visit's cookie is in -state/seen.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18091", "listen address")
	cookie := flag.String("cookie", "", "the session cookie's value /signin sets")
	state := flag.String("state", "/tmp/formsite", "directory of the record (posts, seen)")
	flag.Parse()
	if *cookie == "" {
		log.Fatal("formsite: -cookie is required")
	}
	if err := os.MkdirAll(*state, 0o755); err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	record := func(name string, v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(filepath.Join(*state, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			log.Print(err)
			return
		}
		defer f.Close()
		_, _ = f.Write(append(b, '\n'))
	}
	session := func(r *http.Request) string {
		if c, err := r.Cookie("session"); err == nil {
			return c.Value
		}
		return ""
	}
	page := func(w http.ResponseWriter, title, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>%s</title>
<body style="margin:0;font:24px sans-serif;background:linear-gradient(90deg,#1b6,#26c);color:#fff;height:100vh">%s</body>`, html.EscapeString(title), body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /signin", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: *cookie, Path: "/", MaxAge: 86400, HttpOnly: true})
		record("seen", map[string]string{"path": "/signin", "session": session(r)})
		page(w, "signed in", `<h1 id="who">signed in</h1>`)
	})
	mux.HandleFunc("GET /form", func(w http.ResponseWriter, r *http.Request) {
		record("seen", map[string]string{"path": "/form", "session": session(r)})
		page(w, "the form", `<form method="post" action="/submit" style="padding:40px">
<input id="note" name="note" style="font-size:24px"> <button id="send" type="submit" style="font-size:24px">Send</button></form>`)
	})
	mux.HandleFunc("POST /submit", func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		note := r.PostForm.Get("note")
		record("posts", map[string]string{"note": note, "session": session(r)})
		page(w, "received", `<h1 id="done">received `+html.EscapeString(note)+`</h1>`)
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
