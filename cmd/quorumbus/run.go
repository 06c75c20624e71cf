package main

import "errors"

// run starts the node and blocks until it stops. The broker is wired here once the
// cluster and amqp layers land.
func run(cfg Config) error {
	return errors.New("the broker is not wired yet (cluster and amqp layers in progress)")
}
