// Command echo shows idemhttp on an Echo (v4) server. echo.WrapMiddleware
// adapts any func(http.Handler) http.Handler; the one subtlety is that an
// Echo handler may return an error that Echo turns into a response only
// after the middleware chain has returned, outside the recorder. So the
// adapter below renders handler errors inside the middleware (c.Error),
// where they are recorded like any response.
//
//	go run ./echo     (from examples/http-routers)
package main

import (
	"context"
	"log"
	"net/http"
	"sync/atomic"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
	"github.com/labstack/echo/v4"
)

func main() {
	l, err := dburl.Open(context.Background(), "sqlite:http-echo.db", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	e := newServer(l, new(atomic.Int64))
	log.Fatal(e.Start("127.0.0.1:8084"))
}

// idempotent adapts idemhttp's middleware to Echo.
func idempotent(mw func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err) // render inside the middleware, so it is recorded
				}
			})).ServeHTTP(c.Response(), c.Request())
			return nil
		}
	}
}

func newServer(l *idem.Ledger, orders *atomic.Int64) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	g := e.Group("/orders", idempotent(idemhttp.Middleware(l, &idemhttp.Options{RequireKey: true})))
	g.POST("/:shop", func(c echo.Context) error {
		var in struct {
			Item string `json:"item"`
		}
		if err := c.Bind(&in); err != nil || in.Item == "" {
			return echo.NewHTTPError(http.StatusBadRequest, "want an item") // rendered and stored
		}
		return c.JSON(http.StatusCreated, map[string]any{"shop": c.Param("shop"), "item": in.Item, "order": orders.Add(1)})
	})
	return e
}
