package plan

import (
	"fmt"
	"math"
)

// ErlangC is the probability that an arriving request waits in an M/M/c queue: c servers,
// offered load a = λ/μ erlangs. It is 1 when a ≥ c (the queue grows without bound). The
// Erlang B recursion B(k) = a·B(k−1) / (k + a·B(k−1)) keeps it exact and stable for large c,
// and C = B / (1 − (a/c)(1 − B)).
func ErlangC(c int, a float64) float64 {
	if c < 1 || a < 0 || math.IsNaN(a) {
		panic(fmt.Sprintf("plan: ErlangC(%d, %v): want c ≥ 1 and a ≥ 0", c, a))
	}
	if a >= float64(c) {
		return 1
	}
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	rho := a / float64(c)
	return b / (1 - rho*(1-b))
}

// MMcWait is the mean time a request waits for a server in an M/M/c queue with arrival rate
// lambda and service rate mu per server: ErlangC / (cμ − λ). It is +Inf when λ ≥ cμ.
func MMcWait(lambda, mu float64, c int) float64 {
	if lambda >= float64(c)*mu {
		return math.Inf(1)
	}
	return ErlangC(c, lambda/mu) / (float64(c)*mu - lambda)
}
