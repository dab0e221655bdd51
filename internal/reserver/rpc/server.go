package rpc

import (
	"context"
	"errors"

	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/remote/wire"
)

// Server serves a ledger.Ledger as the leasehold.v1.Ledger gRPC service.
// Every handler authenticates and authorizes its caller before it touches
// the ledger, so registering the Server is enough: no interceptor is needed
// for safety.
type Server struct {
	pb.UnimplementedLedgerServer
	l       ledger.Ledger
	auth    *authenticator
	refused *refusalLog
}

var _ pb.LedgerServer = (*Server)(nil)

// New returns a Server for l after validating cfg. It does not own l.
func New(l ledger.Ledger, cfg Config) (*Server, error) {
	if l == nil {
		return nil, errors.New("rpc: nil ledger")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{l: l, auth: newAuthenticator(cfg), refused: newRefusalLog(cfg.Logger)}, nil
}

// LoopbackOnly reports whether neither a token nor client certificates are
// configured, so that only loopback peers are served.
func (s *Server) LoopbackOnly() bool { return s.auth.loopbackOnly() }

// Register registers s on g.
func (s *Server) Register(g grpc.ServiceRegistrar) { pb.RegisterLedgerServer(g, s) }

// NewGRPCServer returns a grpc.Server with opts (credentials, interceptors,
// Limits.ServerOptions) serving l, under DefaultLimits where opts set no
// other. The caller serves it and stops it.
func NewGRPCServer(l ledger.Ledger, cfg Config, opts ...grpc.ServerOption) (*grpc.Server, error) {
	s, err := New(l, cfg)
	if err != nil {
		return nil, err
	}
	g := grpc.NewServer(append(DefaultLimits().ServerOptions(), opts...)...)
	s.Register(g)
	return g, nil
}

// check authenticates the caller and authorizes the method.
func (s *Server) check(ctx context.Context, method string, acc access, holder ledger.HolderID) error {
	p, st := s.auth.authenticate(ctx)
	if st == nil {
		st = authorize(ctx, p, method, acc, holder)
	}
	if st != nil {
		s.refused.note(ctx, method, p, st)
	}
	return st.Err() // nil for a nil status
}

// fail converts a ledger error to its status.
func fail(err error) error { return wire.Status(err).Err() }

// Configure implements the Configure RPC.
func (s *Server) Configure(ctx context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	if err := s.check(ctx, "Configure", accessAdmin, ""); err != nil {
		return nil, err
	}
	spec, err := wire.PoolSpecFromPB(req.GetSpec())
	if err != nil {
		return nil, fail(err)
	}
	ep, err := s.l.Configure(ctx, spec)
	if err != nil {
		return nil, fail(err)
	}
	return &pb.ConfigureResponse{Epoch: uint64(ep)}, nil
}

// SetDraining implements the SetDraining RPC.
func (s *Server) SetDraining(ctx context.Context, req *pb.SetDrainingRequest) (*pb.SetDrainingResponse, error) {
	if err := s.check(ctx, "SetDraining", accessAdmin, ""); err != nil {
		return nil, err
	}
	if err := s.l.SetDraining(ctx, ledger.PoolID(req.GetPool()), ledger.EngineID(req.GetEngine()), req.GetDraining()); err != nil {
		return nil, fail(err)
	}
	return &pb.SetDrainingResponse{}, nil
}

// KeepAlive implements the KeepAlive RPC.
func (s *Server) KeepAlive(ctx context.Context, req *pb.KeepAliveRequest) (*pb.KeepAliveResponse, error) {
	holder := ledger.HolderID(req.GetHolder())
	if err := s.check(ctx, "KeepAlive", accessHolder, holder); err != nil {
		return nil, err
	}
	ttl, err := wire.DurationFromPB("ttl", req.GetTtl())
	if err != nil {
		return nil, fail(err)
	}
	sess, err := s.l.KeepAlive(ctx, ledger.PoolID(req.GetPool()), holder, ttl)
	if err != nil {
		return nil, fail(err)
	}
	return &pb.KeepAliveResponse{Session: wire.SessionToPB(sess)}, nil
}

// Acquire implements the Acquire RPC. A rejection is a response, not an
// error status.
func (s *Server) Acquire(ctx context.Context, req *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	if err := s.check(ctx, "Acquire", accessHolder, ledger.HolderID(req.GetHolder())); err != nil {
		return nil, err
	}
	r, err := wire.AcquireFromPB(req)
	if err != nil {
		return nil, fail(err)
	}
	g, err := s.l.Acquire(ctx, r)
	if rej := ledger.AsRejection(err); rej != nil {
		return &pb.AcquireResponse{Result: &pb.AcquireResponse_Rejection{Rejection: wire.RejectionToPB(rej)}}, nil
	}
	if err != nil {
		return nil, fail(err)
	}
	return &pb.AcquireResponse{Result: &pb.AcquireResponse_Grant{Grant: wire.GrantToPB(g)}}, nil
}

// Renew implements the Renew RPC.
func (s *Server) Renew(ctx context.Context, req *pb.RenewRequest) (*pb.RenewResponse, error) {
	ref := wire.RefFromPB(req.GetRef())
	if err := s.check(ctx, "Renew", accessHolder, ref.Holder); err != nil {
		return nil, err
	}
	ttl, err := wire.DurationFromPB("ttl", req.GetTtl())
	if err != nil {
		return nil, fail(err)
	}
	rn, err := s.l.Renew(ctx, ref, ttl)
	if err != nil {
		return nil, fail(err)
	}
	return &pb.RenewResponse{Renewal: wire.RenewalToPB(rn)}, nil
}

// Resize implements the Resize RPC. A rejected growth is a response, not an
// error status.
func (s *Server) Resize(ctx context.Context, req *pb.ResizeRequest) (*pb.ResizeResponse, error) {
	ref := wire.RefFromPB(req.GetRef())
	if err := s.check(ctx, "Resize", accessHolder, ref.Holder); err != nil {
		return nil, err
	}
	rn, err := s.l.Resize(ctx, ref, req.GetKvTokens())
	if rej := ledger.AsRejection(err); rej != nil {
		return &pb.ResizeResponse{Result: &pb.ResizeResponse_Rejection{Rejection: wire.RejectionToPB(rej)}}, nil
	}
	if err != nil {
		return nil, fail(err)
	}
	return &pb.ResizeResponse{Result: &pb.ResizeResponse_Renewal{Renewal: wire.RenewalToPB(rn)}}, nil
}

// Grow implements the Grow RPC. Growth is never refused for capacity, so
// every ledger error, ErrInvalidArgument included, is a status.
func (s *Server) Grow(ctx context.Context, req *pb.GrowRequest) (*pb.GrowResponse, error) {
	ref := wire.RefFromPB(req.GetRef())
	if err := s.check(ctx, "Grow", accessHolder, ref.Holder); err != nil {
		return nil, err
	}
	rn, err := s.l.Grow(ctx, ref, req.GetKvTokens())
	if err != nil {
		return nil, fail(err)
	}
	return &pb.GrowResponse{Renewal: wire.RenewalToPB(rn)}, nil
}

// Release implements the Release RPC.
func (s *Server) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	ref := wire.RefFromPB(req.GetRef())
	if err := s.check(ctx, "Release", accessHolder, ref.Holder); err != nil {
		return nil, err
	}
	rel, err := s.l.Release(ctx, ref, wire.UsageFromPB(req.GetUsage()))
	if err != nil {
		return nil, fail(err)
	}
	return &pb.ReleaseResponse{Released: rel.Released, Epoch: uint64(rel.Epoch)}, nil
}

// Reassert implements the Reassert RPC. A rejection is a response, not an
// error status.
func (s *Server) Reassert(ctx context.Context, req *pb.ReassertRequest) (*pb.ReassertResponse, error) {
	if err := s.check(ctx, "Reassert", accessHolder, ledger.HolderID(req.GetLease().GetHolder())); err != nil {
		return nil, err
	}
	lease, err := wire.LeaseFromPB(req.GetLease())
	if err != nil {
		return nil, fail(err)
	}
	ttl, err := wire.DurationFromPB("ttl", req.GetTtl())
	if err != nil {
		return nil, fail(err)
	}
	g, err := s.l.Reassert(ctx, lease, ttl)
	if rej := ledger.AsRejection(err); rej != nil {
		return &pb.ReassertResponse{Result: &pb.ReassertResponse_Rejection{Rejection: wire.RejectionToPB(rej)}}, nil
	}
	if err != nil {
		return nil, fail(err)
	}
	return &pb.ReassertResponse{Result: &pb.ReassertResponse_Grant{Grant: wire.GrantToPB(g)}}, nil
}

// Observe implements the Observe RPC.
func (s *Server) Observe(ctx context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	if err := s.check(ctx, "Observe", accessAdmin, ""); err != nil {
		return nil, err
	}
	obs, err := wire.ObservationFromPB(req.GetObservation())
	if err != nil {
		return nil, fail(err)
	}
	o, err := s.l.Observe(ctx, obs)
	if err != nil {
		return nil, fail(err)
	}
	return &pb.ObserveResponse{Applied: o.Applied, Epoch: uint64(o.Epoch)}, nil
}

// Sweep implements the Sweep RPC.
func (s *Server) Sweep(ctx context.Context, req *pb.SweepRequest) (*pb.SweepResponse, error) {
	if err := s.check(ctx, "Sweep", accessAdmin, ""); err != nil {
		return nil, err
	}
	max, err := wire.IntFromPB("sweep max", req.GetMax())
	if err != nil {
		return nil, fail(err)
	}
	sw, err := s.l.Sweep(ctx, ledger.PoolID(req.GetPool()), max)
	if err != nil {
		return nil, fail(err)
	}
	return &pb.SweepResponse{Expired: int64(sw.Expired), Revoked: int64(sw.Revoked), Holders: int64(sw.Holders)}, nil
}

// Pools implements the Pools RPC.
func (s *Server) Pools(ctx context.Context, _ *pb.PoolsRequest) (*pb.PoolsResponse, error) {
	if err := s.check(ctx, "Pools", accessRead, ""); err != nil {
		return nil, err
	}
	ps, err := s.l.Pools(ctx)
	if err != nil {
		return nil, fail(err)
	}
	out := &pb.PoolsResponse{Pools: make([]string, len(ps))}
	for i, p := range ps {
		out.Pools[i] = string(p)
	}
	return out, nil
}

// List implements the List RPC.
func (s *Server) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	if err := s.check(ctx, "List", accessRead, ""); err != nil {
		return nil, err
	}
	f, err := wire.FilterFromPB(req)
	if err != nil {
		return nil, fail(err)
	}
	ls, err := s.l.List(ctx, f)
	if err != nil {
		return nil, fail(err)
	}
	out := &pb.ListResponse{Leases: make([]*pb.Lease, len(ls))}
	for i, l := range ls {
		out.Leases[i] = wire.LeaseToPB(l)
	}
	return out, nil
}

// Stats implements the Stats RPC.
func (s *Server) Stats(ctx context.Context, req *pb.StatsRequest) (*pb.StatsResponse, error) {
	if err := s.check(ctx, "Stats", accessRead, ""); err != nil {
		return nil, err
	}
	st, err := s.l.Stats(ctx, ledger.PoolID(req.GetPool()))
	if err != nil {
		return nil, fail(err)
	}
	return &pb.StatsResponse{Stats: wire.PoolStatsToPB(st)}, nil
}

// CheckTotals implements the CheckTotals RPC: read access, like Stats.
func (s *Server) CheckTotals(ctx context.Context, req *pb.CheckTotalsRequest) (*pb.CheckTotalsResponse, error) {
	if err := s.check(ctx, "CheckTotals", accessRead, ""); err != nil {
		return nil, err
	}
	ms, err := ledger.CheckTotals(ctx, s.l, ledger.PoolID(req.GetPool()))
	if err != nil {
		return nil, fail(err)
	}
	return &pb.CheckTotalsResponse{Mismatches: wire.TotalsMismatchesToPB(ms)}, nil
}
