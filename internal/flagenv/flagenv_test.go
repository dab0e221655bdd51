package flagenv

import (
	"flag"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	listen := fs.String("grpc-listen", "a", "")
	n := fs.Int("queue-depth", 1, "")
	if err := fs.Parse([]string{"--queue-depth", "7"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"P_GRPC_LISTEN": "b", "P_QUEUE_DEPTH": "9"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Apply(fs, "P_", lookup); err != nil {
		t.Fatal(err)
	}
	if *listen != "b" || *n != 7 {
		t.Errorf("after Apply: grpc-listen=%q queue-depth=%d, want b (from env) and 7 (command line wins)", *listen, *n)
	}
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	fs2.Int("queue-depth", 1, "")
	_ = fs2.Parse(nil)
	err := Apply(fs2, "P_", func(string) (string, bool) { return "many", true })
	if err == nil || !strings.Contains(err.Error(), "P_QUEUE_DEPTH") {
		t.Errorf("bad value: error %v, want one naming P_QUEUE_DEPTH", err)
	}
}

func TestUsage(t *testing.T) {
	var out strings.Builder
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&out)
	fs.String("grpc-listen", "a", "where to listen")
	fs.Usage = Usage(fs, "x --grpc-listen ADDR", "P_", "grpc-listen", "The token comes from P_TOKEN.")
	if err := fs.Parse([]string{"--help"}); err != flag.ErrHelp {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"usage: x --grpc-listen ADDR\n", "P_<FLAG_NAME> (--grpc-listen as P_GRPC_LISTEN)", "\nThe token comes from P_TOKEN.\n", "where to listen"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}
