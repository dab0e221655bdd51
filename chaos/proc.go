package chaos

// Process supervision: each child in its own process group with its output
// appended to logs/NAME.log under the run directory, restartable with the
// same arguments (so on the same ports), signalled for faults, and ended
// with SIGTERM then SIGKILL after a grace period.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process, restartable with the same arguments.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string

	mu      sync.Mutex // guards cmd, waitC, stopped
	cmd     *exec.Cmd
	waitC   chan struct{} // closed when cmd exits
	stopped bool          // SIGSTOPped
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C reaches the runner, which decides.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	waitC := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(waitC)
	}()
	p.cmd, p.waitC, p.stopped = cmd, waitC, false
	return nil
}

// running reports whether the process is alive (stopped counts).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.waitC:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return p.cmd.Process.Signal(sig)
}

// take hands the running process (cmd nil if none) to a caller that ends
// it, marking p not running.
func (p *proc) take() (cmd *exec.Cmd, waitC chan struct{}, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd, waitC, stopped = p.cmd, p.waitC, p.stopped
	p.cmd, p.waitC, p.stopped = nil, nil, false
	return cmd, waitC, stopped
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	if cmd, waitC, _ := p.take(); cmd != nil {
		_ = cmd.Process.Kill()
		<-waitC
	}
}

// terminate sends SIGTERM (SIGCONT first if stopped) and SIGKILLs after
// grace.
func (p *proc) terminate(grace time.Duration) {
	cmd, waitC, stopped := p.take()
	if cmd == nil {
		return
	}
	if stopped {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waitC:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-waitC
	}
}

// servingLine returns the "router serving" line of the process's latest
// start in its log, or "".
func (p *proc) servingLine() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	line := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		switch t := sc.Text(); {
		case strings.HasPrefix(t, "=== "):
			line = ""
		case strings.Contains(t, `msg="router serving"`):
			line = t
		}
	}
	return line
}

// logTail returns the last lines of the process's log, for errors.
func (p *proc) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 15 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
