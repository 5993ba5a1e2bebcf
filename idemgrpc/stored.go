package idemgrpc

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemdev/idem"
)

// ErrorDomain is the domain of the errdetails.ErrorInfo that every status
// made by idemgrpc carries; its Reason is one of the Reason constants.
const ErrorDomain = "idem.dev"

// Reasons in the errdetails.ErrorInfo of idemgrpc's own statuses, for a
// client to branch on. They name the same situations as idemhttp's problem
// types.
const (
	ReasonKeyInvalid        = "KEY_INVALID"         // InvalidArgument: the key is malformed
	ReasonKeyMissing        = "KEY_MISSING"         // InvalidArgument: Options.RequireKey and no key
	ReasonScopeInvalid      = "SCOPE_INVALID"       // InvalidArgument: the scope function returned unusable text
	ReasonScopeUnset        = "SCOPE_UNSET"         // FailedPrecondition: the server set neither Scope nor SharedScope
	ReasonInFlight          = "REQUEST_IN_FLIGHT"   // Aborted: the first call with the key is running
	ReasonKeyMismatch       = "KEY_MISMATCH"        // FailedPrecondition: the key was used for a different call
	ReasonParked            = "OPERATION_PARKED"    // FailedPrecondition: outcome unknown, waits for an operator
	ReasonKeyExpired        = "KEY_EXPIRED"         // FailedPrecondition: done long ago, answer no longer kept
	ReasonNotStored         = "RESPONSE_NOT_STORED" // FailedPrecondition: done once, answer could not be stored
	ReasonLedgerUnavailable = "LEDGER_UNAVAILABLE"  // Unavailable: the ledger did not answer; nothing done
)

// retryDelay is the hint in RetryInfo for answers that a retry with the
// same key may cure.
const retryDelay = time.Second

// action is what becomes of a held key once its handler returned.
type action int

const (
	actComplete action = iota // stored as succeeded, replayed
	actFail                   // stored as failed, the status replayed
	actRelease                // nothing stored, key free: "nothing done, try later"
	actLeave                  // outcome unknown: the claim is left to its lease
)

// storedMeta is idem.Result.Meta for a gRPC answer. Result.Status is the
// gRPC code; Result.Body is the response message (code OK) or the
// google.rpc.Status (any other code), both in deterministic encoding.
type storedMeta struct {
	V int `json:"v"`
	// Type is the full name of the response message, to find its Go type
	// in protoregistry.GlobalTypes on replay.
	Type      string `json:"type,omitempty"`
	NotStored string `json:"not_stored,omitempty"`
}

// released reports whether a handler's status code frees the key instead
// of being stored: the codes that say "nothing was done, try later", as
// idemhttp releases 429 and 5xx by default.
func released(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted,
		codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return true
	}
	return false
}

// unknownOutcome reports whether a handler's status code leaves the claim to its
// lease: the call ran out of time or was cancelled part way, and its effect
// may or may not have happened.
func unknownOutcome(c codes.Code) bool {
	return c == codes.DeadlineExceeded || c == codes.Canceled
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// decide says what to record for a handler's answer.
func decide(resp any, herr error) (action, idem.Result) {
	if herr != nil {
		st := status.Convert(herr)
		switch {
		case unknownOutcome(st.Code()), errors.Is(herr, context.Canceled), errors.Is(herr, context.DeadlineExceeded):
			// A bare context error converts to Unknown, which would release
			// the key: the handler stopped part way, so it is unknown.
			return actLeave, idem.Result{}
		case released(st.Code()):
			return actRelease, idem.Result{}
		}
		body, err := deterministic.Marshal(st.Proto())
		if err != nil {
			return actFail, notStored(int(st.Code()), "unencodable-status")
		}
		return actFail, result(int(st.Code()), storedMeta{V: 1}, body)
	}
	msg, ok := resp.(proto.Message)
	if !ok {
		return actComplete, notStored(int(codes.OK), "not-proto")
	}
	body, err := deterministic.Marshal(msg)
	if err != nil {
		return actComplete, notStored(int(codes.OK), "unencodable")
	}
	return actComplete, result(int(codes.OK), storedMeta{V: 1, Type: string(msg.ProtoReflect().Descriptor().FullName())}, body)
}

func result(code int, m storedMeta, body []byte) idem.Result {
	meta, _ := json.Marshal(m)
	return idem.Result{Status: code, Meta: meta, Body: body}
}

func notStored(code int, why string) idem.Result {
	return result(code, storedMeta{V: 1, NotStored: why}, nil)
}

// replay answers a retry from the ledger, with the header
// "idempotent-replayed: true". The response message is decoded into a new
// message of the type registered under the stored full name: generated
// code registers its types in protoregistry.GlobalTypes when its package is
// linked in, which it is in any server that serves the method.
func replay(ctx context.Context, res idem.Result) (any, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedHeader, "true"))
	var m storedMeta
	if err := json.Unmarshal(res.Meta, &m); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: stored answer unreadable: %v", err)
	}
	if m.NotStored != "" {
		return nil, refusal(codes.FailedPrecondition, ReasonNotStored,
			"idemgrpc: a call with this key was handled once, but its answer could not be stored ("+m.NotStored+"); it will not be handled again: use a new key for a new call")
	}
	if res.Status != int(codes.OK) {
		var p spb.Status
		if err := proto.Unmarshal(res.Body, &p); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: stored status unreadable: %v", err)
		}
		return nil, status.FromProto(&p).Err()
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(m.Type))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: stored response type %s: %v", m.Type, err)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(res.Body, msg); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: stored response unreadable: %v", err)
	}
	return msg, nil
}

// refusal is a status with an ErrorInfo naming reason.
func refusal(c codes.Code, reason, msg string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}

// retryLater is refusal with a RetryInfo hint: retry with the same key
// after retryDelay.
func retryLater(c codes.Code, reason, msg string) error {
	st, err := status.New(c, msg).WithDetails(
		&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)})
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}
