// Package rawrpc calls the reserver's gRPC ledger service directly on the
// generated client, sending exactly the metadata a test gives: no holder
// key unless the test puts one in, unlike the remote backend, which always
// sends its own. Tests use it to play a caller that is not a well-behaved
// router (a stolen token without the session's key, a forged key). It
// owns no connection: the caller dials and closes it.
package rawrpc

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/remote/wire"
)

// HolderMethods are the holder-scoped RPCs; AdminMethods need an admin;
// ReadMethods any principal.
var (
	HolderMethods = []string{"KeepAlive", "Acquire", "Renew", "Resize", "Grow", "Release", "Reassert"}
	AdminMethods  = []string{"Configure", "SetDraining", "Observe", "Sweep"}
	ReadMethods   = []string{"Pools", "List", "Stats"}
)

// Target is what the calls act on.
type Target struct {
	// Holder is the holder every holder-scoped call acts for.
	Holder ledger.HolderID
	// Lease is the lease Renew, Resize (to its size), Grow (by one token),
	// Release and Reassert act on, as Holder; its Pool and Engine are the
	// pool and engine of KeepAlive, SetDraining (false), Observe (nothing
	// used) and Sweep.
	Lease ledger.Lease
	// Acquire is the request of Acquire, made for Holder.
	Acquire ledger.AcquireRequest
	// Spec is what Configure applies.
	Spec ledger.PoolSpec
}

// Calls returns one call per RPC by name, each sending md as its only
// metadata. A call returns the RPC's error untouched (a *status.Status
// error, or nil); a rejection arm of a response is a nil error.
func Calls(conn grpc.ClientConnInterface, md metadata.MD, tg Target) map[string]func(context.Context) error {
	c := pb.NewLedgerClient(conn)
	out := func(ctx context.Context) context.Context { return metadata.NewOutgoingContext(ctx, md.Copy()) }
	ref := tg.Lease.Ref()
	ref.Holder = tg.Holder
	lease := tg.Lease
	lease.Holder = tg.Holder
	acq := tg.Acquire
	acq.Holder = tg.Holder
	ttl := wire.Duration(time.Minute)
	pool, engine := string(tg.Lease.Pool), string(tg.Lease.Engine)
	return map[string]func(context.Context) error{
		"KeepAlive": func(ctx context.Context) error {
			_, err := c.KeepAlive(out(ctx), &pb.KeepAliveRequest{Pool: pool, Holder: string(tg.Holder), Ttl: ttl})
			return err
		},
		"Acquire": func(ctx context.Context) error { _, err := c.Acquire(out(ctx), wire.AcquireToPB(acq)); return err },
		"Renew": func(ctx context.Context) error {
			_, err := c.Renew(out(ctx), &pb.RenewRequest{Ref: wire.RefToPB(ref), Ttl: ttl})
			return err
		},
		"Resize": func(ctx context.Context) error {
			_, err := c.Resize(out(ctx), &pb.ResizeRequest{Ref: wire.RefToPB(ref), KvTokens: lease.KVTokens})
			return err
		},
		"Grow": func(ctx context.Context) error {
			_, err := c.Grow(out(ctx), &pb.GrowRequest{Ref: wire.RefToPB(ref), KvTokens: lease.KVTokens + 1})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := c.Release(out(ctx), &pb.ReleaseRequest{Ref: wire.RefToPB(ref), Usage: wire.UsageToPB(ledger.Usage{})})
			return err
		},
		"Reassert": func(ctx context.Context) error {
			_, err := c.Reassert(out(ctx), &pb.ReassertRequest{Lease: wire.LeaseToPB(lease), Ttl: ttl})
			return err
		},
		"Configure": func(ctx context.Context) error {
			_, err := c.Configure(out(ctx), &pb.ConfigureRequest{Spec: wire.PoolSpecToPB(tg.Spec)})
			return err
		},
		"SetDraining": func(ctx context.Context) error {
			_, err := c.SetDraining(out(ctx), &pb.SetDrainingRequest{Pool: pool, Engine: engine, Draining: false})
			return err
		},
		"Observe": func(ctx context.Context) error {
			obs := ledger.Observation{Pool: tg.Lease.Pool, Engine: tg.Lease.Engine, ObservedAt: time.Now()}
			_, err := c.Observe(out(ctx), &pb.ObserveRequest{Observation: wire.ObservationToPB(obs)})
			return err
		},
		"Sweep": func(ctx context.Context) error {
			_, err := c.Sweep(out(ctx), &pb.SweepRequest{Pool: pool, Max: 10})
			return err
		},
		"Pools": func(ctx context.Context) error { _, err := c.Pools(out(ctx), &pb.PoolsRequest{}); return err },
		"List": func(ctx context.Context) error {
			_, err := c.List(out(ctx), wire.FilterToPB(ledger.Filter{}))
			return err
		},
		"Stats": func(ctx context.Context) error { _, err := c.Stats(out(ctx), &pb.StatsRequest{Pool: pool}); return err },
	}
}

// MD is the metadata of a call sending token as its bearer token and key
// as its holder key (holderkey.MetadataKey); an empty one is not sent.
func MD(token, key string) metadata.MD {
	md := metadata.MD{}
	if token != "" {
		md.Append("authorization", "Bearer "+token)
	}
	if key != "" {
		md.Append(holderkey.MetadataKey, key)
	}
	return md
}
