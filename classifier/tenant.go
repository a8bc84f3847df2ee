package classifier

import "context"

// tenantKey carries, in a Classify call's context, the tenant whose
// request is classified: its calls take turns with other tenants' for
// the classifier's slots (see slots), and the breaker weighs failures by
// who had them.
type tenantKey struct{}

type tenant struct {
	name   string
	weight int
}

// OwnTenant is the tenant of the calls made for no client's request
// (eval, shadow).
const OwnTenant = "(classifier)"

// WithTenant returns ctx carrying the tenant (an API key's name, or a
// keyless client's address) and its weight (0 counts as 1) that a
// classification made with it is for.
func WithTenant(ctx context.Context, name string, weight int) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant{name, max(1, weight)})
}

// TenantOf is the tenant WithTenant put in ctx, or OwnTenant with weight
// 1.
func TenantOf(ctx context.Context) (name string, weight int) {
	if t, ok := ctx.Value(tenantKey{}).(tenant); ok {
		return t.name, t.weight
	}
	return OwnTenant, 1
}
