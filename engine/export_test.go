package engine

// LagSumTolerance is lagSumTolerance, for the tests of package engine_test.
const LagSumTolerance = lagSumTolerance
