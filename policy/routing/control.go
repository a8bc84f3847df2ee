package routing

import (
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing/internal/share"
)

// The share controller (control.share) lives in policy/routing/internal/share;
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

// ControlOptionsFor are the controller's options from the config's
// control.share (Load and Now are the caller's).
func ControlOptionsFor(s *policy.ShareControl) ControlOptions {
	return ControlOptions{Pool: s.Pool, Target: s.Target.Value, Capacity: s.Target.Capacity,
		Utilization: s.Utilization, Window: s.Window.Std()}
}
