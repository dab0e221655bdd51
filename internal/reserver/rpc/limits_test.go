package rpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/internal/gen/leaseholdv1"
	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/reserver/rpc"
)

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*rpc.Limits)
		want []string // substrings of the error; none: valid
	}{
		{name: "defaults", edit: func(*rpc.Limits) {}},
		{name: "tiny message", edit: func(l *rpc.Limits) { l.MaxRecvBytes = 10 }, want: []string{"--grpc-max-recv-bytes = 10: want 1024.."}},
		{name: "no streams", edit: func(l *rpc.Limits) { l.MaxStreams = 0 }, want: []string{"--grpc-max-streams = 0"}},
		{name: "every field", edit: func(l *rpc.Limits) { *l = rpc.Limits{} },
			want: []string{"--grpc-max-recv-bytes", "--grpc-max-streams", "--grpc-idle-timeout", "--grpc-handshake-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := rpc.DefaultLimits()
			tc.edit(&l)
			err := l.Validate()
			if len(tc.want) == 0 && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// The remote client's pings satisfy the server's enforcement policy: one
// pinging more often is sent GOAWAY (too_many_pings) and loses its calls.
func TestClientKeepaliveWithinPolicy(t *testing.T) {
	if remote.KeepaliveTime < rpc.KeepaliveMinTime {
		t.Errorf("remote.KeepaliveTime = %s, below the server's enforcement MinTime %s", remote.KeepaliveTime, rpc.KeepaliveMinTime)
	}
}

// A request message over MaxRecvBytes is refused ResourceExhausted before
// it is decoded or authenticated; one under it goes through.
func TestOversizeMessageRefused(t *testing.T) {
	lim := rpc.DefaultLimits()
	lim.MaxRecvBytes = 4096
	_, url := serve(t, rpc.Config{}, "127.0.0.1:0", lim.ServerOptions()...)
	addr, err := remote.ParseTarget(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewLedgerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		pool string
		want codes.Code
	}{
		{"over the limit", strings.Repeat("p", 8192), codes.ResourceExhausted},
		{"under the limit", "p", codes.NotFound},
	} {
		_, err := c.Stats(ctx, &pb.StatsRequest{Pool: tc.pool})
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: Stats = %v, want %s", tc.name, err, tc.want)
		}
	}
}
