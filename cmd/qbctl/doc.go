// Command qbctl is the Quorumbus operator CLI.
//
// It speaks to a node the way a Service Bus user's code does: entity management goes
// through the unmodified azservicebus/admin client against the node's admin API
// (--admin-addr), and peek and dead-letter work go through the azservicebus data-plane
// client over AMQP. Where that SDK has no call, qbctl sends the Service Bus management
// request itself over a go-amqp connection of its own (the token on $cbs, as the SDKs
// do): batch deletes (dlq purge) and a peek of a session-enabled entity without a
// session (mgmtpeek.go). So qbctl exercises exactly the surfaces users rely on; of the
// broker's own packages it imports only cluster/meta, for its table of entity properties
// (which flags exist, for which entity kinds, with which bounds). The cluster, node and
// partition commands have no Service Bus equivalent: they call the node's JSON cluster API (/$cluster/ on the admin
// listener, docs/admin-api.md), signing a SAS token from the same connection string.
//
// The connection string comes from --connection-string, else QUORUMBUS_CONNECTION_STRING,
// else the file connection-string in the node's data directory (--data, default ./data),
// which `quorumbus` writes at start-up.
//
//	qbctl status
//	qbctl queue create|list|show|update|delete|purge [NAME] [property flags | --from-file F] [--reset]
//	qbctl topic create|list|show|update|delete|purge [NAME] [property flags | --from-file F] [--reset]
//	qbctl subscription create|list|show|update|delete|purge TOPIC [SUB] [property flags | --from-file F] [--reset]
//	qbctl rule create|list|show|delete TOPIC SUB [RULE] [--sql EXPR | --correlation-id ID ... | --from-file F] [--action SQL]
//	qbctl peek ENTITY [--count N] [--from SEQ] [--session ID]
//	qbctl dlq inspect|purge|resubmit ENTITY [--count N]
//	qbctl send|receive ENTITY [--session ID], qbctl key list|create|delete, qbctl namespace purge [--prefix P]|delete-entities --prefix P
//	qbctl completion bash|zsh|fish
//	qbctl cluster status|partitions
//	qbctl apply -f Config.json [--prune]
//	qbctl node drain|undrain|remove NODE
//	qbctl partition transfer-leader GROUP [--to NODE]
//
// ENTITY is a queue name or TOPIC/Subscriptions/SUB. --output (-o) table (default) or
// json, before or after the command; entity and rule JSON uses the SDK's property names
// and is read back by create/update --from-file. The command tree is built with
// spf13/cobra, which gives every level its help and generates shell completion.
// docs/qbctl.md is the user's guide.
package main
