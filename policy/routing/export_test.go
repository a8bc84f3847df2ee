package routing

// ControllerObserve is one request's work for the controller: its score,
// the threshold, and the decision.
func ControllerObserve(c *Controller, v float64) bool {
	c.ObserveScore(v)
	pass := v >= c.Threshold()
	c.ObserveDecision(pass, pass)
	return pass
}
