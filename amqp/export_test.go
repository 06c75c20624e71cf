package amqp

// NewFakeBackend returns the in-memory Backend this package's SDK tests run on, and a
// function that adds an entity to it, for the conformance test (package amqp_test) that
// holds it to the real backend's behaviour.
func NewFakeBackend() (Backend, func(EntityInfo)) {
	b := newMemBackend()
	return b, func(info EntityInfo) { b.addEntity(info) }
}
