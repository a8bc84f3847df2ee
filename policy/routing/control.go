package routing

import "github.com/switchyard/switchyard/policy/internal/share"

// The share controller (control.share) lives in policy/internal/share;
// these are its names in routing's API.
type (
	// Controller holds one pool's share of policy-routed requests at a
	// target by moving the threshold of the routes' auto score bounds.
	Controller = share.Controller
	// ControlOptions configure a Controller (from control.share).
	ControlOptions = share.Options
	// ControlState is a controller's state, for /admin/control.
	ControlState = share.State
)

// NewController starts a controller at threshold 0.5 and, in capacity
// mode, at a target of half the traffic.
func NewController(o ControlOptions) *Controller { return share.New(o) }
