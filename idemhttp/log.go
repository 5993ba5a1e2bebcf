package idemhttp

import (
	"context"
	"log/slog"

	"github.com/idemdev/idem"
)

// logOp writes one line about a guarded request. The key is always logged
// as idem.KeyHash: keys are chosen by clients and may carry personal data
// (an order number, an e-mail address); the hash still ties the lines of
// one key together, and `idem keys show` prints it for a key an operator
// holds.
func (g *guard) logOp(ctx context.Context, level slog.Level, msg string, op idem.Op, attempt int64, attrs ...slog.Attr) {
	if !g.cfg.log.Enabled(ctx, level) {
		return
	}
	base := []slog.Attr{
		slog.String("scope", op.Scope), slog.String("key", idem.KeyHash(op.Key)),
		slog.String("fingerprint", op.Fingerprint), slog.Int64("attempt", attempt),
	}
	g.cfg.log.LogAttrs(ctx, level, "idemhttp: "+msg, append(base, attrs...)...)
}
