//go:build deps

// Package deps pins the modules the project is built from, so that go.mod keeps them
// while the packages that use them are written. It is never built (see the build tag).
package deps

import (
	_ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	_ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	_ "github.com/Azure/go-amqp"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
)
