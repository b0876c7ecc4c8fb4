package panics

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// Recover turns a panic of the goroutine that runs it into an Error with
// the panic's value and a stack that reaches it, whatever the value.
func TestRecover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fn    func()
		panic string // the value, printed; "" when fn does not panic
	}{
		{name: "no panic", fn: func() {}},
		{name: "a string", fn: func() { panic("kaboom") }, panic: "kaboom"},
		{name: "an error", fn: func() { panic(io.EOF) }, panic: "EOF"},
		{name: "a runtime error", fn: func() {
			var m map[string]int
			m["x"] = 1
		}, panic: "assignment to entry in nil map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Recover(tc.fn)
			if tc.panic == "" {
				require.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			require.Equal(t, tc.panic, fmt.Sprint(p.Value))
			require.Equal(t, "panicked: "+tc.panic, p.Error())
			require.Contains(t, string(p.Stack), "panics.TestRecover", "the stack reaches the panic")
		})
	}
}
