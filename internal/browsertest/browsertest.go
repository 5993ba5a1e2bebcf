// Package browsertest starts a headless Chromium (Debian's chromium
// package) for tests that drive a real browser: the admin page, and pages
// that call the gateway from another origin.
package browsertest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// Browser starts a fresh headless Chromium for one test and returns its
// context. It skips the test when Chromium is missing, unless
// IDEM_REQUIRE_BROWSER=1. Any JavaScript dialog (an alert smuggled in
// through a key) fails the test.
func Browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("IDEM_REQUIRE_BROWSER") == "1" {
			t.Fatalf("%s not found and IDEM_REQUIRE_BROWSER=1: %v", chromiumPath, err)
		}
		t.Skipf("%s not found (apt-get install chromium); skipping the browser test (IDEM_REQUIRE_BROWSER=1 fails instead)", chromiumPath)
	}
	var mu sync.Mutex
	var opened []string
	t.Cleanup(func() { // runs last, after the browser is gone
		mu.Lock()
		defer mu.Unlock()
		for _, m := range opened {
			t.Errorf("a JavaScript dialog opened: %q", m)
		}
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1600),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil { // start the browser now, to fail early
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			opened = append(opened, ev.Message)
			mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return ctx
}
