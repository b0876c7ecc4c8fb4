package panics

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// one is an index the compiler cannot check.
var one = 1

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
			var s []int
			_ = s[one]
		}, panic: "runtime error: index out of range [1] with length 0"},
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
