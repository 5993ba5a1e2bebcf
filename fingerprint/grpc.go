package fingerprint

// GRPCScheme names how the fingerprint of a gRPC call is computed: the
// SHA-256 of the text GRPCInput returns. It prefixes every fingerprint from
// GRPC; package idemgrpc stores and logs these.
const GRPCScheme = "grpc-sha256"

// GRPCInput returns the bytes whose SHA-256 is the fingerprint of a unary
// gRPC call:
//
//	"idemgrpc/v1\n" full method name "\n" request message bytes
//
// The full method name is as grpc-go passes it to an interceptor
// ("/pkg.Service/Method"). The message bytes must be a deterministic
// encoding (proto.MarshalOptions{Deterministic: true}), so that the same
// message always gives the same fingerprint within one build. The format is
// versioned ("idemgrpc/v1"): stored fingerprints depend on it.
func GRPCInput(fullMethod string, msg []byte) []byte {
	b := make([]byte, 0, len("idemgrpc/v1\n")+len(fullMethod)+1+len(msg))
	b = append(b, "idemgrpc/v1\n"...)
	b = append(b, fullMethod...)
	b = append(b, '\n')
	return append(b, msg...)
}

// GRPC returns the fingerprint of a unary gRPC call: GRPCScheme, a colon
// and the lowercase hex SHA-256 of GRPCInput(fullMethod, msg).
func GRPC(fullMethod string, msg []byte) string {
	return digest(GRPCScheme, GRPCInput(fullMethod, msg))
}
