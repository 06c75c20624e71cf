//go:build long

package fsm

const longModel = true
