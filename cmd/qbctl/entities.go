package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

type entityKind int

const (
	kindQueue entityKind = iota
	kindTopic
	kindSubscription
)

func (k entityKind) String() string {
	return [...]string{"queue", "topic", "subscription"}[k]
}

// props collects the property flags a user actually passed; nil means "not given".
type props struct {
	lockDuration, defaultTTL, dupWindow, autoDelete        *string
	maxDelivery, maxSizeMB                                 *int32
	maxMsgKB                                               *int64
	requiresSession, requiresDup, dlqOnExpiry, dlqOnFilter *bool
	partitioned, supportOrdering                           *bool
	status                                                 *admin.EntityStatus
	forwardTo, forwardDLQTo, userMetadata                  *string
}

func (p *props) register(fs *flag.FlagSet, k entityKind) {
	dur := func(dst **string, name, usage string) {
		fs.Func(name, usage+" (Go duration, e.g. 30s, 10m, 336h)", func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			s := isoDuration(d)
			*dst = &s
			return nil
		})
	}
	i32 := func(dst **int32, name, usage string) {
		fs.Func(name, usage, func(v string) error {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return err
			}
			x := int32(n)
			*dst = &x
			return nil
		})
	}
	boolean := func(dst **bool, name, usage string) {
		fs.Func(name, usage+" (true or false)", func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return err
			}
			*dst = &b
			return nil
		})
	}
	str := func(dst **string, name, usage string) {
		fs.Func(name, usage, func(v string) error { *dst = &v; return nil })
	}
	dur(&p.defaultTTL, "default-ttl", "DefaultMessageTimeToLive")
	dur(&p.autoDelete, "auto-delete-on-idle", "AutoDeleteOnIdle")
	str(&p.userMetadata, "user-metadata", "UserMetadata")
	fs.Func("status", "Active, Disabled, SendDisabled or ReceiveDisabled", func(v string) error {
		s := admin.EntityStatus(v)
		p.status = &s
		return nil
	})
	if k != kindTopic {
		dur(&p.lockDuration, "lock-duration", "LockDuration")
		i32(&p.maxDelivery, "max-delivery-count", "MaxDeliveryCount")
		boolean(&p.requiresSession, "requires-session", "RequiresSession (fixed at creation)")
		boolean(&p.dlqOnExpiry, "dead-letter-on-expiration", "DeadLetteringOnMessageExpiration")
		str(&p.forwardTo, "forward-to", "ForwardTo")
		str(&p.forwardDLQTo, "forward-dlq-to", "ForwardDeadLetteredMessagesTo")
	}
	if k != kindSubscription {
		i32(&p.maxSizeMB, "max-size-mb", "MaxSizeInMegabytes")
		boolean(&p.requiresDup, "requires-duplicate-detection", "RequiresDuplicateDetection (fixed at creation)")
		dur(&p.dupWindow, "duplicate-window", "DuplicateDetectionHistoryTimeWindow")
		boolean(&p.partitioned, "partitioned", "EnablePartitioning")
		fs.Func("max-message-size-kb", "MaxMessageSizeInKilobytes", func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			p.maxMsgKB = &n
			return err
		})
	}
	if k == kindTopic {
		boolean(&p.supportOrdering, "support-ordering", "SupportOrdering")
	}
	if k == kindSubscription {
		boolean(&p.dlqOnFilter, "dead-letter-on-filter-errors", "EnableDeadLetteringOnFilterEvaluationExceptions")
	}
}

func set[T any](dst **T, v *T) {
	if v != nil {
		*dst = v
	}
}

func (p *props) applyQueue(q *admin.QueueProperties) {
	set(&q.LockDuration, p.lockDuration)
	set(&q.DefaultMessageTimeToLive, p.defaultTTL)
	set(&q.DuplicateDetectionHistoryTimeWindow, p.dupWindow)
	set(&q.AutoDeleteOnIdle, p.autoDelete)
	set(&q.MaxDeliveryCount, p.maxDelivery)
	set(&q.MaxSizeInMegabytes, p.maxSizeMB)
	set(&q.MaxMessageSizeInKilobytes, p.maxMsgKB)
	set(&q.RequiresSession, p.requiresSession)
	set(&q.RequiresDuplicateDetection, p.requiresDup)
	set(&q.DeadLetteringOnMessageExpiration, p.dlqOnExpiry)
	set(&q.EnablePartitioning, p.partitioned)
	set(&q.Status, p.status)
	set(&q.ForwardTo, p.forwardTo)
	set(&q.ForwardDeadLetteredMessagesTo, p.forwardDLQTo)
	set(&q.UserMetadata, p.userMetadata)
}

func (p *props) applyTopic(t *admin.TopicProperties) {
	set(&t.DefaultMessageTimeToLive, p.defaultTTL)
	set(&t.DuplicateDetectionHistoryTimeWindow, p.dupWindow)
	set(&t.AutoDeleteOnIdle, p.autoDelete)
	set(&t.MaxSizeInMegabytes, p.maxSizeMB)
	set(&t.MaxMessageSizeInKilobytes, p.maxMsgKB)
	set(&t.RequiresDuplicateDetection, p.requiresDup)
	set(&t.EnablePartitioning, p.partitioned)
	set(&t.SupportOrdering, p.supportOrdering)
	set(&t.Status, p.status)
	set(&t.UserMetadata, p.userMetadata)
}

func (p *props) applySubscription(s *admin.SubscriptionProperties) {
	set(&s.LockDuration, p.lockDuration)
	set(&s.DefaultMessageTimeToLive, p.defaultTTL)
	set(&s.AutoDeleteOnIdle, p.autoDelete)
	set(&s.MaxDeliveryCount, p.maxDelivery)
	set(&s.RequiresSession, p.requiresSession)
	set(&s.DeadLetteringOnMessageExpiration, p.dlqOnExpiry)
	set(&s.EnableDeadLetteringOnFilterEvaluationExceptions, p.dlqOnFilter)
	set(&s.Status, p.status)
	set(&s.ForwardTo, p.forwardTo)
	set(&s.ForwardDeadLetteredMessagesTo, p.forwardDLQTo)
	set(&s.UserMetadata, p.userMetadata)
}

// isoDuration renders d as the ISO-8601 duration the admin API carries (P1DT2H3M4.5S).
func isoDuration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	s := "P"
	if days > 0 {
		s += strconv.FormatInt(int64(days), 10) + "D"
	}
	if h == 0 && m == 0 && d == 0 {
		if days == 0 {
			return "PT0S"
		}
		return s
	}
	s += "T"
	if h > 0 {
		s += strconv.FormatInt(int64(h), 10) + "H"
	}
	if m > 0 {
		s += strconv.FormatInt(int64(m), 10) + "M"
	}
	if d > 0 {
		s += strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
	}
	return s
}

func (g *globals) entityCmd(ctx context.Context, k entityKind, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: %s needs a verb: create, list, show, update, delete or purge", errUsage, k)
	}
	verb := args[0]
	fs := flag.NewFlagSet("qbctl "+k.String()+" "+verb, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	var p props
	if verb == "create" || verb == "update" {
		p.register(fs, k)
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	want := map[entityKind]int{kindQueue: 1, kindTopic: 1, kindSubscription: 2}[k]
	if verb == "list" {
		want--
	}
	if len(pos) != want {
		return fmt.Errorf("%w: %s %s takes %d argument(s), got %d", errUsage, k, verb, want, len(pos))
	}
	if verb == "purge" {
		path := "/" + url.PathEscape(pos[0])
		if k == kindSubscription {
			path += "/Subscriptions/" + url.PathEscape(pos[1])
		}
		return g.purge(ctx, path+"/$purge", strings.Join(pos, "/Subscriptions/"))
	}
	ac, err := g.adminClient()
	if err != nil {
		return err
	}
	switch k {
	case kindQueue:
		return g.queueVerb(ctx, ac, verb, pos, &p)
	case kindTopic:
		return g.topicVerb(ctx, ac, verb, pos, &p)
	default:
		return g.subscriptionVerb(ctx, ac, verb, pos, &p)
	}
}

func (g *globals) queueVerb(ctx context.Context, ac *admin.Client, verb string, pos []string, p *props) error {
	switch verb {
	case "create":
		var q admin.QueueProperties
		p.applyQueue(&q)
		if _, err := ac.CreateQueue(ctx, pos[0], &admin.CreateQueueOptions{Properties: &q}); err != nil {
			return err
		}
		return g.showQueue(ctx, ac, pos[0])
	case "update":
		cur, err := ac.GetQueue(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("queue %q not found", pos[0])
		}
		q := cur.QueueProperties
		p.applyQueue(&q)
		if _, err := ac.UpdateQueue(ctx, pos[0], q, nil); err != nil {
			return err
		}
		return g.showQueue(ctx, ac, pos[0])
	case "show":
		return g.showQueue(ctx, ac, pos[0])
	case "delete":
		_, err := ac.DeleteQueue(ctx, pos[0], nil)
		return err
	case "list":
		t := &table{header: []string{"NAME", "ACTIVE", "DEAD-LETTER", "SCHEDULED", "SIZE"}}
		pager := ac.NewListQueuesRuntimePropertiesPager(nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, q := range page.QueueRuntimeProperties {
				t.add(q.QueueName, q.ActiveMessageCount, q.DeadLetterMessageCount, q.ScheduledMessageCount, q.SizeInBytes)
			}
		}
		return g.print(t)
	}
	return fmt.Errorf("%w: unknown queue verb %q", errUsage, verb)
}

func (g *globals) showQueue(ctx context.Context, ac *admin.Client, name string) error {
	q, err := ac.GetQueue(ctx, name, nil)
	if err != nil {
		return err
	}
	if q == nil {
		return fmt.Errorf("queue %q not found", name)
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, name, nil)
	if err != nil {
		return err
	}
	keys := []string{"Name", "Status", "LockDuration", "MaxDeliveryCount", "DefaultMessageTimeToLive",
		"DeadLetteringOnMessageExpiration", "RequiresSession", "RequiresDuplicateDetection",
		"DuplicateDetectionHistoryTimeWindow", "MaxSizeInMegabytes", "MaxMessageSizeInKilobytes",
		"EnablePartitioning", "AutoDeleteOnIdle", "ForwardTo", "ForwardDeadLetteredMessagesTo", "UserMetadata"}
	vals := []any{q.QueueName, q.Status, q.LockDuration, q.MaxDeliveryCount, q.DefaultMessageTimeToLive,
		q.DeadLetteringOnMessageExpiration, q.RequiresSession, q.RequiresDuplicateDetection,
		q.DuplicateDetectionHistoryTimeWindow, q.MaxSizeInMegabytes, q.MaxMessageSizeInKilobytes,
		q.EnablePartitioning, q.AutoDeleteOnIdle, q.ForwardTo, q.ForwardDeadLetteredMessagesTo, q.UserMetadata}
	if rt != nil {
		keys = append(keys, "ActiveMessageCount", "DeadLetterMessageCount", "ScheduledMessageCount",
			"TotalMessageCount", "SizeInBytes", "CreatedAt", "UpdatedAt", "AccessedAt")
		vals = append(vals, rt.ActiveMessageCount, rt.DeadLetterMessageCount, rt.ScheduledMessageCount,
			rt.TotalMessageCount, rt.SizeInBytes, rt.CreatedAt, rt.UpdatedAt, rt.AccessedAt)
	}
	return g.printKV(keys, vals)
}

func (g *globals) topicVerb(ctx context.Context, ac *admin.Client, verb string, pos []string, p *props) error {
	switch verb {
	case "create":
		var t admin.TopicProperties
		p.applyTopic(&t)
		if _, err := ac.CreateTopic(ctx, pos[0], &admin.CreateTopicOptions{Properties: &t}); err != nil {
			return err
		}
		return g.showTopic(ctx, ac, pos[0])
	case "update":
		cur, err := ac.GetTopic(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("topic %q not found", pos[0])
		}
		t := cur.TopicProperties
		p.applyTopic(&t)
		if _, err := ac.UpdateTopic(ctx, pos[0], t, nil); err != nil {
			return err
		}
		return g.showTopic(ctx, ac, pos[0])
	case "show":
		return g.showTopic(ctx, ac, pos[0])
	case "delete":
		_, err := ac.DeleteTopic(ctx, pos[0], nil)
		return err
	case "list":
		t := &table{header: []string{"NAME", "SUBSCRIPTIONS", "SCHEDULED", "SIZE"}}
		pager := ac.NewListTopicsRuntimePropertiesPager(nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, x := range page.TopicRuntimeProperties {
				t.add(x.TopicName, x.SubscriptionCount, x.ScheduledMessageCount, x.SizeInBytes)
			}
		}
		return g.print(t)
	}
	return fmt.Errorf("%w: unknown topic verb %q", errUsage, verb)
}

func (g *globals) showTopic(ctx context.Context, ac *admin.Client, name string) error {
	t, err := ac.GetTopic(ctx, name, nil)
	if err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("topic %q not found", name)
	}
	rt, err := ac.GetTopicRuntimeProperties(ctx, name, nil)
	if err != nil {
		return err
	}
	keys := []string{"Name", "Status", "DefaultMessageTimeToLive", "RequiresDuplicateDetection",
		"DuplicateDetectionHistoryTimeWindow", "MaxSizeInMegabytes", "MaxMessageSizeInKilobytes",
		"EnablePartitioning", "SupportOrdering", "AutoDeleteOnIdle", "UserMetadata"}
	vals := []any{t.TopicName, t.Status, t.DefaultMessageTimeToLive, t.RequiresDuplicateDetection,
		t.DuplicateDetectionHistoryTimeWindow, t.MaxSizeInMegabytes, t.MaxMessageSizeInKilobytes,
		t.EnablePartitioning, t.SupportOrdering, t.AutoDeleteOnIdle, t.UserMetadata}
	if rt != nil {
		keys = append(keys, "SubscriptionCount", "ScheduledMessageCount", "SizeInBytes", "CreatedAt", "UpdatedAt", "AccessedAt")
		vals = append(vals, rt.SubscriptionCount, rt.ScheduledMessageCount, rt.SizeInBytes, rt.CreatedAt, rt.UpdatedAt, rt.AccessedAt)
	}
	return g.printKV(keys, vals)
}

func (g *globals) subscriptionVerb(ctx context.Context, ac *admin.Client, verb string, pos []string, p *props) error {
	switch verb {
	case "create":
		var s admin.SubscriptionProperties
		p.applySubscription(&s)
		if _, err := ac.CreateSubscription(ctx, pos[0], pos[1], &admin.CreateSubscriptionOptions{Properties: &s}); err != nil {
			return err
		}
		return g.showSubscription(ctx, ac, pos[0], pos[1])
	case "update":
		cur, err := ac.GetSubscription(ctx, pos[0], pos[1], nil)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("subscription %s/%s not found", pos[0], pos[1])
		}
		s := cur.SubscriptionProperties
		p.applySubscription(&s)
		if _, err := ac.UpdateSubscription(ctx, pos[0], pos[1], s, nil); err != nil {
			return err
		}
		return g.showSubscription(ctx, ac, pos[0], pos[1])
	case "show":
		return g.showSubscription(ctx, ac, pos[0], pos[1])
	case "delete":
		_, err := ac.DeleteSubscription(ctx, pos[0], pos[1], nil)
		return err
	case "list":
		t := &table{header: []string{"NAME", "ACTIVE", "DEAD-LETTER", "TOTAL"}}
		pager := ac.NewListSubscriptionsRuntimePropertiesPager(pos[0], nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, x := range page.SubscriptionRuntimeProperties {
				t.add(x.SubscriptionName, x.ActiveMessageCount, x.DeadLetterMessageCount, x.TotalMessageCount)
			}
		}
		return g.print(t)
	}
	return fmt.Errorf("%w: unknown subscription verb %q", errUsage, verb)
}

func (g *globals) showSubscription(ctx context.Context, ac *admin.Client, topic, name string) error {
	s, err := ac.GetSubscription(ctx, topic, name, nil)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("subscription %s/%s not found", topic, name)
	}
	rt, err := ac.GetSubscriptionRuntimeProperties(ctx, topic, name, nil)
	if err != nil {
		return err
	}
	keys := []string{"Topic", "Name", "Status", "LockDuration", "MaxDeliveryCount", "DefaultMessageTimeToLive",
		"DeadLetteringOnMessageExpiration", "EnableDeadLetteringOnFilterEvaluationExceptions", "RequiresSession",
		"AutoDeleteOnIdle", "ForwardTo", "ForwardDeadLetteredMessagesTo", "UserMetadata"}
	vals := []any{s.TopicName, s.SubscriptionName, s.Status, s.LockDuration, s.MaxDeliveryCount, s.DefaultMessageTimeToLive,
		s.DeadLetteringOnMessageExpiration, s.EnableDeadLetteringOnFilterEvaluationExceptions, s.RequiresSession,
		s.AutoDeleteOnIdle, s.ForwardTo, s.ForwardDeadLetteredMessagesTo, s.UserMetadata}
	if rt != nil {
		keys = append(keys, "ActiveMessageCount", "DeadLetterMessageCount", "TotalMessageCount", "CreatedAt", "UpdatedAt", "AccessedAt")
		vals = append(vals, rt.ActiveMessageCount, rt.DeadLetterMessageCount, rt.TotalMessageCount, rt.CreatedAt, rt.UpdatedAt, rt.AccessedAt)
	}
	return g.printKV(keys, vals)
}
