package classifier

// Waiters reports how many Classify calls wait on the shared call for in (0
// when none runs), so that tests line callers up without sleeping.
func (c *Classifier) Waiters(in Input) int {
	in.truncate(c.opts.MaxInputChars)
	key := in.hash(c.seed)
	c.flights.mu.Lock()
	defer c.flights.mu.Unlock()
	if f, ok := c.flights.calls[key]; ok {
		return f.waiters
	}
	return 0
}

// Truncated is in as the classifier would send it within limit.
func Truncated(in Input, limit int) Input {
	in.truncate(limit)
	return in
}
