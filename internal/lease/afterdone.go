package lease

// DoneFunc is a Ticket that runs a function when its Done closes, with no
// goroutine waiting on Done meanwhile: a router dispatches thousands of
// requests a second, and a watcher goroutine per request cost a goroutine
// start and two scheduler hand-offs each. *Held and *Sub are DoneFuncs; a
// caller holding another Ticket selects on Done.
type DoneFunc interface {
	Ticket
	// AfterDone arranges for f to run in its own goroutine once Done
	// closes (at once if it is closed already). stop undoes that and
	// reports whether it did; false means f has been started. As
	// context.AfterFunc.
	AfterDone(f func()) (stop func() bool)
}

var (
	_ DoneFunc = (*Held)(nil)
	_ DoneFunc = (*Sub)(nil)
)

// hook is one AfterDone function.
type hook struct{ f func() }

// hooks are a ticket's AfterDone functions not yet run or stopped; the
// ticket's mutex guards them.
type hooks []*hook

// add registers f, or starts it at once when done.
func (hs *hooks) add(f func(), done bool) *hook {
	if done {
		go f()
		return nil
	}
	h := &hook{f: f}
	*hs = append(*hs, h)
	return h
}

// remove unregisters h, reporting whether it was registered.
func (hs *hooks) remove(h *hook) bool {
	for i, x := range *hs {
		if x == h {
			*hs = append((*hs)[:i], (*hs)[i+1:]...)
			return true
		}
	}
	return false
}

// fire starts every registered function and forgets them.
func (hs *hooks) fire() {
	for _, h := range *hs {
		go h.f()
	}
	*hs = nil
}
