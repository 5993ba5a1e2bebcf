// Command chi shows idemhttp on a chi router: the middleware is an
// ordinary func(http.Handler) http.Handler, so it goes in r.With or
// r.Use like any chi middleware.
//
//	go run ./chi     (from examples/http-routers)
package main

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
)

func main() {
	l, err := dburl.Open(context.Background(), "sqlite:http-chi.db", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	srv := &http.Server{Addr: "127.0.0.1:8083", Handler: newRouter(l, new(atomic.Int64)), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("listening on http://%s", srv.Addr)
	log.Fatal(srv.ListenAndServe())
}

func newRouter(l *idem.Ledger, orders *atomic.Int64) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.With(idemhttp.Middleware(l, &idemhttp.Options{RequireKey: true})).Post("/orders/{shop}", func(w http.ResponseWriter, r *http.Request) {
		n := orders.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"shop": chi.URLParam(r, "shop"), "order": n})
	})
	r.Get("/orders", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{"orders": orders.Load()})
	})
	return r
}
