//go:build !(invariants || race)

package fsm

const invariantsOn = false

func (f *FSM) checkInvariants() {}
