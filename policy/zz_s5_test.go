package policy_test

import (
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/policy"
)

func TestZZS5(t *testing.T) {
	for _, c := range []string{
		"topology:\n  nodes: !foo\n",
		"topology:\n  nodes: !foo\n  fabric: ring\n",
		"topology:\n  nodes: !foo [a]\n",
		"topology:\n  nodes: !!seq\n",
		"topology:\n  fabric: !foo\n",
		"server:\n  listen: !!str\n",
		"topology:\n  nodes: !!str 5\n",
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					fmt.Printf("%q PANIC %v\n", c, r)
				}
			}()
			_, err := policy.Load("x.yaml", []byte(c), testRegistry)
			fmt.Printf("%q: %v\n", c, err)
		}()
	}
}
