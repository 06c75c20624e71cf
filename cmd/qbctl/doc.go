// Command qbctl is the Quorumbus operator CLI.
//
// It speaks to a node the way a Service Bus user's code does: entity management goes
// through the unmodified azservicebus/admin client against the node's admin API
// (--admin-addr), and peek and dead-letter work go through the azservicebus data-plane
// client over AMQP. So qbctl exercises exactly the surfaces users rely on, and it never
// imports the broker's own packages. The cluster, node and partition commands have no
// Service Bus equivalent: they call the node's JSON cluster API (/$cluster/ on the admin
// listener, docs/admin-api.md), signing a SAS token from the same connection string.
//
// The connection string comes from --connection-string, else QUORUMBUS_CONNECTION_STRING,
// else the file connection-string in the node's data directory (--data, default ./data),
// which `quorumbus` writes at start-up.
//
//	qbctl status
//	qbctl queue create|list|show|update|delete [NAME] [property flags]
//	qbctl topic create|list|show|update|delete [NAME] [property flags]
//	qbctl subscription create|list|show|update|delete TOPIC [SUB] [property flags]
//	qbctl rule create|list|show|delete TOPIC SUB [RULE] [--sql EXPR | --correlation-id ID ...] [--action SQL]
//	qbctl peek ENTITY [--count N] [--from SEQ]
//	qbctl dlq inspect|purge|resubmit ENTITY [--count N]
//	qbctl cluster status|partitions
//	qbctl node drain|remove NODE
//	qbctl partition transfer-leader GROUP [--to NODE]
//
// ENTITY is a queue name or TOPIC/Subscriptions/SUB. --output (-o) table (default) or
// json; the cluster, node and partition commands also take it after the command.
package main
