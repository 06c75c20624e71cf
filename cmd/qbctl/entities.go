package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
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

// names are the positional arguments that name one entity of the kind.
func (k entityKind) names() []string {
	if k == kindSubscription {
		return []string{"TOPIC", "SUB"}
	}
	return []string{"NAME"}
}

func (k entityKind) target(pos []string) target {
	t := target{kind: k.String(), name: strings.Join(pos, "/"), list: "qbctl " + k.String() + " list"}
	if k == kindSubscription && len(pos) > 0 {
		t.list = "qbctl subscription list " + pos[0]
		if len(pos) == 2 {
			t.name = pos[0] + "/Subscriptions/" + pos[1]
		}
	}
	return t
}

// entityCmd is `qbctl queue|topic|subscription VERB`.
func (g *globals) entityCmd(k entityKind) *cobra.Command {
	names := strings.Join(k.names(), " ")
	parent := ""
	if k == kindSubscription {
		parent = " TOPIC"
	}
	verb := func(use, short string, args cobra.PositionalArgs, fn func(ctx context.Context, ac *admin.Client, pos []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: args,
			RunE: func(c *cobra.Command, pos []string) error {
				ac, err := g.adminClient()
				if err != nil {
					return err
				}
				return g.human(fn(c.Context(), ac, pos), k.target(pos))
			}}
	}
	var p props
	create := verb("create "+names+" [property flags]", "create a "+k.String(), nil,
		func(ctx context.Context, ac *admin.Client, pos []string) error {
			return g.createEntity(ctx, ac, k, pos, &p)
		})
	create.Args = g.nameArgs(k, &p)
	create.Long = "Create a " + k.String() + ". Properties not given take Service Bus's defaults.\n\n" + fromFileHelp(k, "create")
	p.register(create, k)
	var up props
	update := verb("update "+names+" [property flags]", "change properties of a "+k.String(), nil,
		func(ctx context.Context, ac *admin.Client, pos []string) error {
			return g.updateEntity(ctx, ac, k, pos, &up)
		})
	update.Args = g.nameArgs(k, &up)
	update.Long = "Read the " + k.String() + ", change only the properties given, and write it back.\n\n" + fromFileHelp(k, "update")
	up.register(update, k)
	show := verb("show "+names, "show a "+k.String()+"'s properties and counts", nArgs(k.names()...),
		func(ctx context.Context, ac *admin.Client, pos []string) error { return g.showEntity(ctx, ac, k, pos) })
	del := verb("delete "+names, "delete a "+k.String()+" and its messages", nArgs(k.names()...),
		func(ctx context.Context, ac *admin.Client, pos []string) error {
			return g.deleteEntity(ctx, ac, k, pos)
		})
	listArgs := k.names()[:len(k.names())-1]
	list := verb("list"+parent, "list "+k.String()+"s with their message counts", nArgs(listArgs...),
		func(ctx context.Context, ac *admin.Client, pos []string) error {
			return g.listEntities(ctx, ac, k, pos)
		})
	purge := g.purgeCmd(k, names)
	n := len(k.names())
	for _, v := range []*cobra.Command{create, update, show, del, purge} {
		v.ValidArgsFunction = g.completeEntityArgs(k, n)
	}
	if k == kindSubscription {
		list.ValidArgsFunction = g.completeEntityArgs(kindTopic, 1)
	} else {
		list.ValidArgsFunction = cobra.NoFileCompletions
	}
	create.ValidArgsFunction = g.completeEntityArgs(k, n-1) // a new name: only its topic
	aliases := map[entityKind][]string{kindQueue: {"queues"}, kindTopic: {"topics"}, kindSubscription: {"subscriptions", "sub"}}[k]
	return group(k.String(), k.String()+"s: create, list, show, update, delete, purge", aliases,
		create, list, show, update, del, purge)
}

// nameArgs accepts the entity's name(s), which create and update may leave to the Name
// (and Topic) of --from-file.
func (g *globals) nameArgs(k entityKind, p *props) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		want := len(k.names())
		if len(args) == want || (p.fromFile != "" && len(args) == 0) {
			return nil
		}
		return usageErr(c.CommandPath(), "%s %s takes %s, got %d argument(s)", k, c.Name(), strings.Join(k.names(), " "), len(args))
	}
}

func (g *globals) createEntity(ctx context.Context, ac *admin.Client, k entityKind, pos []string, p *props) error {
	pos, err := p.load(k, pos)
	if err != nil {
		return err
	}
	p.perPartitionSize()
	switch k {
	case kindQueue:
		var q admin.QueueProperties
		p.apply(&q)
		_, err = ac.CreateQueue(ctx, pos[0], &admin.CreateQueueOptions{Properties: &q})
	case kindTopic:
		var t admin.TopicProperties
		p.apply(&t)
		_, err = ac.CreateTopic(ctx, pos[0], &admin.CreateTopicOptions{Properties: &t})
	default:
		var s admin.SubscriptionProperties
		p.apply(&s)
		_, err = ac.CreateSubscription(ctx, pos[0], pos[1], &admin.CreateSubscriptionOptions{Properties: &s})
		if err == nil {
			err = g.setSubscriptionStatus(ctx, pos, s.Status)
		}
	}
	if err != nil {
		return g.human(err, k.target(pos))
	}
	return g.showEntity(ctx, ac, k, pos)
}

func (g *globals) updateEntity(ctx context.Context, ac *admin.Client, k entityKind, pos []string, p *props) error {
	pos, err := p.load(k, pos)
	if err != nil {
		return err
	}
	notFound := withHint(fmt.Errorf("%s not found", k.target(pos)), "'"+k.target(pos).list+"' lists them; 'create' makes a new one")
	switch k {
	case kindQueue:
		cur, err := ac.GetQueue(ctx, pos[0], nil)
		if err != nil || cur == nil {
			return firstNonNil(err, notFound)
		}
		q := cur.QueueProperties
		p.apply(&q)
		_, err = ac.UpdateQueue(ctx, pos[0], q, nil)
		if err != nil {
			return err
		}
	case kindTopic:
		cur, err := ac.GetTopic(ctx, pos[0], nil)
		if err != nil || cur == nil {
			return firstNonNil(err, notFound)
		}
		t := cur.TopicProperties
		p.apply(&t)
		if _, err = ac.UpdateTopic(ctx, pos[0], t, nil); err != nil {
			return err
		}
	default:
		cur, err := ac.GetSubscription(ctx, pos[0], pos[1], nil)
		if err != nil || cur == nil {
			return firstNonNil(err, notFound)
		}
		s := cur.SubscriptionProperties
		p.apply(&s)
		if _, err = ac.UpdateSubscription(ctx, pos[0], pos[1], s, nil); err != nil {
			return err
		}
		if s.Status != nil && (cur.Status == nil || *cur.Status != *s.Status) {
			if err := g.setSubscriptionStatus(ctx, pos, s.Status); err != nil {
				return err
			}
		}
	}
	return g.showEntity(ctx, ac, k, pos)
}

// setSubscriptionStatus sets a subscription's Status, which the Go SDK's admin client
// leaves out of the descriptions it sends: an update whose description carries only the
// Status element (the admin API changes only the elements present). Nil or Active on a
// new subscription needs nothing.
func (g *globals) setSubscriptionStatus(ctx context.Context, pos []string, st *admin.EntityStatus) error {
	if st == nil {
		return nil
	}
	body := `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
		`<SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
		`<Status>` + string(*st) + `</Status></SubscriptionDescription></content></entry>`
	path := "/" + url.PathEscape(pos[0]) + "/Subscriptions/" + url.PathEscape(pos[1])
	_, err := g.adminDo(ctx, http.MethodPut, path, []byte(body), "application/atom+xml;type=entry;charset=utf-8",
		map[string]string{"If-Match": "*"})
	return err
}

func firstNonNil(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (g *globals) deleteEntity(ctx context.Context, ac *admin.Client, k entityKind, pos []string) error {
	var err error
	switch k {
	case kindQueue:
		_, err = ac.DeleteQueue(ctx, pos[0], nil)
	case kindTopic:
		_, err = ac.DeleteTopic(ctx, pos[0], nil)
	default:
		_, err = ac.DeleteSubscription(ctx, pos[0], pos[1], nil)
	}
	if err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(map[string]any{"Deleted": k.target(pos).name, "Kind": k.String()})
	}
	fmt.Fprintf(g.stdout, "deleted %s\n", k.target(pos))
	return nil
}

func (g *globals) listEntities(ctx context.Context, ac *admin.Client, k entityKind, pos []string) error {
	switch k {
	case kindQueue:
		t := &table{header: []string{"NAME", "ACTIVE", "DEAD-LETTER", "SCHEDULED", "SIZE"},
			jsonKeys: []string{"Name", "ActiveMessageCount", "DeadLetterMessageCount", "ScheduledMessageCount", "SizeInBytes"}}
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
	case kindTopic:
		t := &table{header: []string{"NAME", "SUBSCRIPTIONS", "SCHEDULED", "SIZE"},
			jsonKeys: []string{"Name", "SubscriptionCount", "ScheduledMessageCount", "SizeInBytes"}}
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
	t := &table{header: []string{"NAME", "ACTIVE", "DEAD-LETTER", "TOTAL"},
		jsonKeys: []string{"Name", "ActiveMessageCount", "DeadLetterMessageCount", "TotalMessageCount"}}
	pager := ac.NewListSubscriptionsRuntimePropertiesPager(pos[0], nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return g.human(err, target{kind: "topic", name: pos[0], list: "qbctl topic list"})
		}
		for _, x := range page.SubscriptionRuntimeProperties {
			t.add(x.SubscriptionName, x.ActiveMessageCount, x.DeadLetterMessageCount, x.TotalMessageCount)
		}
	}
	return g.print(t)
}

// showEntity prints every property of the entity under the SDK's names (a JSON file of
// it is what --from-file reads), then its runtime counts.
func (g *globals) showEntity(ctx context.Context, ac *admin.Client, k entityKind, pos []string) error {
	notFound := withHint(fmt.Errorf("%s not found", k.target(pos)), "'"+k.target(pos).list+"' lists them")
	var o object
	switch k {
	case kindQueue:
		q, err := ac.GetQueue(ctx, pos[0], nil)
		if err != nil || q == nil {
			return firstNonNil(err, notFound)
		}
		o.add("Name", q.QueueName)
		o.addProps(k, &q.QueueProperties)
		rt, err := ac.GetQueueRuntimeProperties(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if rt != nil {
			o.add("ActiveMessageCount", rt.ActiveMessageCount).add("DeadLetterMessageCount", rt.DeadLetterMessageCount).
				add("ScheduledMessageCount", rt.ScheduledMessageCount).add("TotalMessageCount", rt.TotalMessageCount).
				add("SizeInBytes", rt.SizeInBytes).add("CreatedAt", rt.CreatedAt).add("UpdatedAt", rt.UpdatedAt).add("AccessedAt", rt.AccessedAt)
		}
	case kindTopic:
		t, err := ac.GetTopic(ctx, pos[0], nil)
		if err != nil || t == nil {
			return firstNonNil(err, notFound)
		}
		o.add("Name", t.TopicName)
		o.addProps(k, &t.TopicProperties)
		rt, err := ac.GetTopicRuntimeProperties(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if rt != nil {
			o.add("SubscriptionCount", rt.SubscriptionCount).add("ScheduledMessageCount", rt.ScheduledMessageCount).
				add("SizeInBytes", rt.SizeInBytes).add("CreatedAt", rt.CreatedAt).add("UpdatedAt", rt.UpdatedAt).add("AccessedAt", rt.AccessedAt)
		}
	default:
		s, err := ac.GetSubscription(ctx, pos[0], pos[1], nil)
		if err != nil || s == nil {
			return firstNonNil(err, notFound)
		}
		o.add("Topic", s.TopicName).add("Name", s.SubscriptionName)
		o.addProps(k, &s.SubscriptionProperties)
		rt, err := ac.GetSubscriptionRuntimeProperties(ctx, pos[0], pos[1], nil)
		if err != nil {
			return err
		}
		if rt != nil {
			o.add("ActiveMessageCount", rt.ActiveMessageCount).add("DeadLetterMessageCount", rt.DeadLetterMessageCount).
				add("TotalMessageCount", rt.TotalMessageCount).add("CreatedAt", rt.CreatedAt).add("UpdatedAt", rt.UpdatedAt).add("AccessedAt", rt.AccessedAt)
		}
	}
	return g.printObject(&o)
}
