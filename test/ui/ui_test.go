package ui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/quorumbus/quorumbus/test/harness"
)

// browser starts headless Chromium for t and returns its context; every console error,
// uncaught exception and browser log error (a failed request included) fails the test
// at its end.
func browser(t *testing.T) context.Context {
	t.Helper()
	if os.Getenv("QUORUMBUS_UI") != "1" {
		t.Skip("browser test: run with QUORUMBUS_UI=1 (make ui-test)")
	}
	bin := os.Getenv("QUORUMBUS_UI_CHROMIUM")
	if bin == "" {
		bin = "chromium"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("no browser %q: install Debian's chromium (make ui-test does) or set QUORUMBUS_UI_CHROMIUM: %v", bin, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	messages := chromedp.Console(ctx)
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return // the browser is closing
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancelCtx() // closes the browser and ends the console subscription
		cancelAlloc()
		wg.Wait()
		for _, p := range problems {
			t.Errorf("browser console: %s", p)
		}
	})
	return ctx
}

// artifacts is where screenshots go: QUORUMBUS_UI_ARTIFACTS or a temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("QUORUMBUS_UI_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// until waits until the JavaScript expression is true in the page, or fails saying what
// it waited for and what the page showed.
func until(expr, what string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond),
			chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
		if err != nil {
			body, _ := chromedp.Evaluate[string](`document.querySelector('main').innerText`)(ctx, tg)
			return fmt.Errorf("waiting until %s (%s): %w\npage:\n%s", what, expr, err, body)
		}
		return nil
	})
}

// labelled fails when a form control on the page has no label, a button or link has no
// name, or a table has no header cell: what keyboard and screen-reader users need.
func labelled(page string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		bad, err := chromedp.Evaluate[[]string](`(() => {
			const bad = [];
			const name = (el) => (el.getAttribute('aria-label') || el.textContent || '').trim();
			for (const el of document.querySelectorAll('input, select, textarea')) {
				if (el.labels.length === 0 && !el.getAttribute('aria-label')) bad.push('unlabelled ' + el.tagName.toLowerCase() + '#' + el.id);
			}
			for (const el of document.querySelectorAll('button, a[href]')) {
				if (!name(el)) bad.push('nameless ' + el.tagName.toLowerCase() + ' ' + el.outerHTML.slice(0, 80));
			}
			for (const el of document.querySelectorAll('table')) {
				if (!el.querySelector('th')) bad.push('table without header cells #' + el.id);
			}
			return bad;
		})()`)(ctx, tg)
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			return fmt.Errorf("the %s page is not accessible: %s", page, strings.Join(bad, "; "))
		}
		return nil
	})
}

// screenshot saves the viewport as name.png in dir, after checking the page is labelled.
func screenshot(dir, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := labelled(name)(ctx, tg); err != nil {
			return err
		}
		png, err := chromedp.CaptureScreenshot()(ctx, tg)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	})
}

func text(sel string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '')`, sel)
}

func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

func set(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.CSS(sel), v)
}

// keyOf returns the key name and key of a connection string.
func keyOf(t *testing.T, cs string) (name, key string) {
	t.Helper()
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "SharedAccessKeyName":
			name = v
		case "SharedAccessKey":
			key = v
		}
	}
	if name == "" || key == "" {
		t.Fatalf("no key in %q", cs)
	}
	return name, key
}

// runner runs browser steps, failing t with what they were for.
func runner(t *testing.T, ctx context.Context) func(what string, actions ...chromedp.Action[chromedp.Void]) {
	return func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// login opens the page and logs in with a connection string, or (keyName set) with a
// key name and key.
func login(base, connStr, keyName, key, dir string) chromedp.Action[chromedp.Void] {
	fill := set(`textarea[name="cs"]`, connStr)
	if keyName != "" {
		fill = chromedp.Steps(set(`input[name="keyName"]`, keyName), set(`input[name="key"]`, key))
	}
	return chromedp.Steps(
		chromedp.Navigate(base),
		visible(`#login-submit`),
		screenshot(dir, "login"),
		fill,
		click(`#login-submit`),
		until(`location.hash === '#/overview' && !!document.querySelector('#ns-h')`, "the overview shows"))
}

// A user logs in with the connection string, looks at the namespace and the cluster,
// creates a queue and sends a message to it from the UI, and peeks it (the JSON body
// pretty-printed). An SDK consumer dead-letters it; the user sees it with its reason in
// the dead-letter view and resubmits it, and the SDK receives it again, without the
// dead-letter reason. No page logs a console error.
func TestExplorerInBrowser(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	node := harness.Start(t)
	base := "http://" + node.Admin + "/"
	const queue = "orders"

	run := runner(t, ctx)
	run("log in",
		login(base, node.ConnectionString, "", "", dir),
		until(text(`.cards`)+`.includes('Nodes alive1 / 1')`, "the overview counts the node"),
		screenshot(dir, "overview"))

	run("create a queue",
		click(`#nav a[href="#/entities"]`),
		visible(`#new-queue-name`),
		set(`#new-queue-name`, queue),
		set(`#new-queue-MaxDeliveryCount`, "5"),
		click(`form[aria-label="Create queue"] button[type="submit"]`),
		until(`location.hash === '#/q/`+queue+`' && `+text(`main h2`)+`.startsWith('`+queue+`')`, "the new queue's page shows"))
	props, err := node.AdminClient(t).GetQueue(context.Background(), queue, nil)
	if err != nil || props == nil || props.MaxDeliveryCount == nil || *props.MaxDeliveryCount != 5 {
		t.Fatalf("the queue the UI created: %+v, %v; want MaxDeliveryCount 5", props, err)
	}

	run("cluster view",
		click(`#nav a[href="#/cluster"]`),
		until(text(`#nodes-h`)+` === 'Nodes (1)'`, "the cluster view lists the node"),
		until(text(`#parts-h`)+` !== 'Partitions (0)' && `+text(`#parts-h`)+` !== ''`, "the cluster view lists the queue's partitions"),
		screenshot(dir, "cluster"))

	run("send a message",
		click(`#nav a[href="#/entities"]`),
		click(`#queues a[href="#/q/`+queue+`"]`),
		click(`a[href="#/q/`+queue+`/send"]`),
		visible(`#send-body`),
		set(`#send-body`, `{"order":42,"item":"tea"}`),
		set(`#send-subject`, "new-order"),
		set(`#send-properties`, "region=eu"),
		click(`#send`),
		until(text(`#send-status`)+` === 'Sent to `+queue+`.'`, "the UI says the message was sent"))

	run("peek it",
		click(`a[href="#/q/`+queue+`/messages"]`),
		visible(`#peek`),
		click(`#peek`),
		until(`document.querySelectorAll('#messages tbody tr').length === 1`, "the peek lists one message"),
		click(`#messages tbody button`),
		until(text(`#message-body`)+` === '{\n  "order": 42,\n  "item": "tea"\n}'`, "the body shows as pretty-printed JSON"),
		until(text(`.detail`)+`.includes('new-order') && `+text(`.detail`)+`.includes('"eu"')`, "subject and properties show"),
		screenshot(dir, "messages"))

	// An SDK consumer dead-letters it.
	client := node.Client(t)
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(context.Background())
	sdkCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := rcv.ReceiveMessages(sdkCtx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the SDK receives the UI's message: %d messages, %v", len(msgs), err)
	}
	if string(msgs[0].Body) != `{"order":42,"item":"tea"}` || msgs[0].ApplicationProperties["region"] != "eu" {
		t.Fatalf("the SDK got body %q, properties %v", msgs[0].Body, msgs[0].ApplicationProperties)
	}
	reason := "ui-test-reason"
	if err := rcv.DeadLetterMessage(sdkCtx, msgs[0], &azservicebus.DeadLetterOptions{Reason: &reason}); err != nil {
		t.Fatal(err)
	}

	run("see it dead-lettered and resubmit it",
		click(`a[href="#/q/`+queue+`/deadletter"]`),
		visible(`#dlq-peek`),
		click(`#dlq-peek`),
		until(`document.querySelectorAll('#dlq-messages tbody tr').length === 1 && `+text(`#dlq-messages`)+`.includes('`+reason+`')`,
			"the dead-letter view shows the message and its reason"),
		screenshot(dir, "deadletter"),
		click(`#resubmit`),
		until(text(`#redrive-status`)+` === 'Resubmitted 1 message(s) to the queue `+queue+`.'`, "the UI reports the resubmit"),
		until(`document.querySelector('#redrive-progress').value === 1`, "the progress bar is full"))

	msgs, err = rcv.ReceiveMessages(sdkCtx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the SDK receives the resubmitted message: %d messages, %v", len(msgs), err)
	}
	if m := msgs[0]; string(m.Body) != `{"order":42,"item":"tea"}` || m.DeadLetterReason != nil || m.Subject == nil || *m.Subject != "new-order" {
		t.Fatalf("resubmitted message: body %q, dead-letter reason %v, subject %v", m.Body, m.DeadLetterReason, m.Subject)
	}
	if err := rcv.CompleteMessage(sdkCtx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	// Purge all messages goes through batch delete, as the SDKs' purgeMessages: the
	// message an SDK receiver holds locked stays and can still be completed.
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	for _, b := range []string{"kept locked", "purged"} {
		if err := snd.SendMessage(sdkCtx, &azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err = rcv.ReceiveMessages(sdkCtx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the SDK receives a message to hold locked: %d messages, %v", len(msgs), err)
	}
	run("purge the queue",
		click(`a[href="#/q/`+queue+`/properties"]`),
		visible(`#purge-all`),
		click(`#purge-all`),
		click(`#purge-all`),
		until(text(`#purge-status`)+` === 'Purged 1 message(s).'`, "the UI reports the purge of the message not locked"))
	if err := rcv.CompleteMessage(sdkCtx, msgs[0], nil); err != nil {
		t.Fatalf("the locked message lost its lock in the UI's purge: %v", err)
	}

	run("entities with live counts",
		click(`#nav a[href="#/entities"]`),
		until(`!!document.querySelector('#queues a[href="#/q/`+queue+`"]')`, "the entities page lists the queue"),
		screenshot(dir, "entities"))
	t.Logf("screenshots in %s", dir)
}

// A user creates a topic, a session-enabled subscription and a rule, edits the rule and
// the subscription, deletes the default rule, sends a message to the topic that the rule
// routes, sees its session and the state a consumer set, and deletes the topic; the
// admin SDK sees each change.
func TestExplorerTopicsRulesAndSessions(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	node := harness.Start(t)
	adm := node.AdminClient(t)
	bg, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := runner(t, ctx)
	keyName, key := keyOf(t, node.ConnectionString)
	run("log in with a key name and key", login("http://"+node.Admin+"/", "", keyName, key, dir))

	run("create a topic and a subscription",
		click(`#nav a[href="#/entities"]`),
		set(`#new-topic-name`, "events"),
		click(`form[aria-label="Create topic"] button[type="submit"]`),
		until(`location.hash === '#/t/events'`, "the topic's page shows"),
		visible(`#new-subscription-name`),
		set(`#new-subscription-name`, "audit"),
		click(`#new-subscription-RequiresSession`),
		click(`form[aria-label="Create subscription"] button[type="submit"]`),
		until(`location.hash === '#/t/events/s/audit'`, "the subscription's page shows"))
	if sp, err := adm.GetSubscription(bg, "events", "audit", nil); err != nil || sp == nil || sp.RequiresSession == nil || !*sp.RequiresSession {
		t.Fatalf("the subscription the UI created: %+v, %v; want RequiresSession", sp, err)
	}

	run("create, edit and delete rules",
		click(`a[href="#/t/events/s/audit/rules"]`),
		until(`document.querySelectorAll('#rules tbody tr').length === 1`, "the default rule shows"),
		set(`#rule-name`, "blue"),
		set(`#rule-sql`, "color = 'red'"),
		click(`form[aria-label="Create or update a rule"] button[type="submit"]`),
		until(`document.querySelectorAll('#rules tbody tr').length === 2`, "the new rule shows"),
		click(`button[aria-label="Edit rule blue"]`),
		set(`#rule-sql`, "color = 'blue'"),
		click(`form[aria-label="Create or update a rule"] button[type="submit"]`),
		until(text(`#rules`)+`.includes("color = 'blue'")`, "the edited rule shows"),
		chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll('#rules tbody tr')].find((r) => r.querySelector('th').textContent === '$Default').querySelector('button.danger').id = 'del-default'`),
		click(`#del-default`),
		click(`#del-default`),
		until(`document.querySelectorAll('#rules tbody tr').length === 1`, "the default rule is gone"),
		screenshot(dir, "rules"))
	var rules []string
	pager := adm.NewListRulesPager("events", "audit", nil)
	for pager.More() {
		page, err := pager.NextPage(bg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Rules {
			f, _ := r.Filter.(*admin.SQLFilter)
			if f == nil {
				t.Fatalf("rule %s: filter %#v, want SQL", r.Name, r.Filter)
			}
			rules = append(rules, r.Name+": "+f.Expression)
		}
	}
	if strings.Join(rules, ";") != "blue: color = 'blue'" {
		t.Fatalf("rules after the UI's changes: %q", rules)
	}

	run("update the subscription",
		click(`a[href="#/t/events/s/audit/properties"]`),
		set(`#edit-subscription-MaxDeliveryCount`, "7"),
		set(`#edit-subscription-UserMetadata`, "owned by team audit"),
		click(`form[aria-label="Update subscription"] button[type="submit"]`),
		until(`document.querySelector('#status').textContent === 'Saved'`, "the UI says it saved"))
	if sp, err := adm.GetSubscription(bg, "events", "audit", nil); err != nil || sp == nil || *sp.MaxDeliveryCount != 7 ||
		!*sp.RequiresSession || sp.UserMetadata == nil || *sp.UserMetadata != "owned by team audit" {
		t.Fatalf("the subscription after the update: %+v, %v", sp, err)
	}
	run("clear a property",
		until(`document.querySelector('#edit-subscription-UserMetadata').value === 'owned by team audit'`, "the form shows the saved value"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#edit-subscription-UserMetadata').value = ''; document.querySelector('#status').textContent = ''`),
		click(`form[aria-label="Update subscription"] button[type="submit"]`),
		until(`document.querySelector('#status').textContent === 'Saved'`, "the UI says it saved"))
	if sp, err := adm.GetSubscription(bg, "events", "audit", nil); err != nil || sp == nil || (sp.UserMetadata != nil && *sp.UserMetadata != "") {
		t.Fatalf("the subscription after clearing its metadata: %+v, %v", sp, err)
	}

	run("send to the topic",
		click(`#nav a[href="#/entities"]`),
		click(`#topics a[href="#/t/events"]`),
		click(`a[href="#/t/events/send"]`),
		set(`#send-body`, "checkout"),
		set(`#send-content-type`, "text/plain"),
		set(`#send-session-id`, "cart-7"),
		set(`#send-properties`, "color=blue"),
		click(`#send`),
		until(text(`#send-status`)+` === 'Sent to events.'`, "the UI says the message was sent"))
	sr, err := node.Client(t).AcceptSessionForSubscription(bg, "events", "audit", "cart-7", nil)
	if err != nil {
		t.Fatalf("the rule routed the message to the subscription's session: %v", err)
	}
	if err := sr.SetSessionState(bg, []byte(`{"step":2}`), nil); err != nil {
		t.Fatal(err)
	}
	run("see the session and its state, while the consumer holds it",
		click(`#nav a[href="#/entities"]`),
		click(`#topics a[href="#/t/events/s/audit"]`),
		click(`a[href="#/t/events/s/audit/sessions"]`),
		until(text(`#sessions tbody`)+`.startsWith('cart-7')`, "the session shows"),
		click(`#sessions tbody button`),
		until(text(`#session-state`)+` === '{\n  "step": 2\n}'`, "its state shows as JSON"),
		screenshot(dir, "sessions"))
	if err := sr.Close(bg); err != nil {
		t.Fatal(err)
	}
	run("peek the session's messages",
		click(`a[href="#/t/events/s/audit/messages"]`),
		visible(`#peek-session`),
		set(`#peek-session`, "cart-7"),
		click(`#peek`),
		until(`document.querySelectorAll('#messages tbody tr').length === 1 && `+text(`#messages tbody`)+`.includes('cart-7')`,
			"the session's message shows"),
		click(`#messages tbody button`),
		until(text(`#message-body`)+` === 'checkout'`, "its text body shows"))

	run("delete the topic",
		click(`a[href="#/t/events"]`),
		click(`a[href="#/t/events/properties"]`),
		until(`[...document.querySelectorAll('button.danger')].some((b) => b.textContent === 'Delete topic')`, "the danger zone shows"),
		chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll('button.danger')].find((b) => b.textContent === 'Delete topic').id = 'del-topic'`),
		click(`#del-topic`),
		click(`#del-topic`),
		until(`location.hash === '#/entities' && !!document.querySelector('#topics-h')`, "the entities page shows"),
		until(text(`#topics-h`)+` === 'Topics (0)'`, "the topic is gone"))
	if tp, err := adm.GetTopic(bg, "events", nil); err != nil || tp != nil {
		t.Fatalf("the topic after the UI deleted it: %+v, %v", tp, err)
	}
}

// The cluster view of a three-node cluster, seen from a node: every node alive, and
// each partition of a partitioned queue with a leader and three replicas.
func TestExplorerClusterView(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	c := harness.StartCluster(t, 3)
	bg, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	partitioned := true
	if _, err := c.Nodes[0].AdminClient(t).CreateQueue(bg, "payments", &admin.CreateQueueOptions{
		Properties: &admin.QueueProperties{EnablePartitioning: &partitioned}}); err != nil {
		t.Fatal(err)
	}
	run := runner(t, ctx)
	n2 := c.Nodes[1]
	run("log in to the second node", login("http://"+n2.Admin+"/", n2.ConnectionString, "", "", dir))
	run("cluster view",
		click(`#nav a[href="#/cluster"]`),
		until(text(`#nodes-h`)+` === 'Nodes (3)' && document.querySelectorAll('#nodes .badge.ok').length === 3`,
			"three nodes, all alive"),
		until(`/^Rebalancing \(\d+ moves?\)$/.test(`+text(`#rebalance-h`)+`) && document.querySelector('#rebalance-state .badge') !== null`,
			"the rebalancing panel (GET /$cluster/rebalance) with its state"),
		until(`(() => {
			const rows = [...document.querySelectorAll('#partitions tbody tr')];
			return rows.length >= 2 && rows.every((r) => r.cells[3].textContent !== '' && !r.querySelector('.badge.bad') &&
				(r.cells[4].textContent.match(/lag/g) || []).length === 3);
		})()`, "every partition with a leader and three replicas"),
		until(`document.querySelector('main p.note').textContent.startsWith('Answered by node n2;')`, "the view says which node answered"),
		screenshot(dir, "cluster-3-nodes"))
}

// rowCell is the text of cell i of the entity table row for entity, as a JS expression.
func rowCell(entity string, i int) string {
	return fmt.Sprintf(`(document.querySelector('tr[data-entity=%q]')?.cells[%d]?.textContent ?? '')`, entity, i)
}

// Rates and health at a glance, on a three-node cluster seen from its first node:
// messages in and out per second and the clients attached, per entity and per node, from
// the nodes' own metrics; then the problems: a dead-letter queue that grows, and a node
// that stops answering (paused), with its replicas unreachable and the partitions they
// belong to under-replicated.
func TestExplorerRatesAndProblems(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	c := harness.StartCluster(t, 3)
	n1, n3 := c.Nodes[0], c.Nodes[2]
	bg, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := n1.AdminClient(t)
	one := int32(1)
	for name, props := range map[string]*admin.QueueProperties{"traffic": nil, "fragile": {MaxDeliveryCount: &one}} {
		if _, err := adm.CreateQueue(bg, name, &admin.CreateQueueOptions{Properties: props}); err != nil {
			t.Fatal(err)
		}
	}
	client := n1.Client(t)
	sender, err := client.NewSender("traffic", nil)
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := client.NewReceiverForQueue("traffic", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Steady traffic through "traffic" until the test ends: a message sent and one
	// received every 100 ms.
	traffic, stopTraffic := context.WithCancel(bg)
	var wg sync.WaitGroup
	defer func() { stopTraffic(); wg.Wait() }()
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for traffic.Err() == nil {
			if err := sender.SendMessage(traffic, &azservicebus.Message{Body: []byte("tick")}, nil); err != nil && traffic.Err() == nil {
				t.Errorf("send: %v", err)
				return
			}
			<-tick.C
		}
	})
	wg.Go(func() {
		for traffic.Err() == nil {
			msgs, err := receiver.ReceiveMessages(traffic, 10, nil)
			if err != nil {
				return // the test is ending
			}
			for _, m := range msgs {
				_ = receiver.CompleteMessage(traffic, m, nil)
			}
		}
	})

	run := runner(t, ctx)
	run("log in to the first node", login("http://"+n1.Admin+"/", n1.ConnectionString, "", "", dir))
	// Columns: Queue, Status, Active, Scheduled, Dead-lettered, Size, In, Out, Connections, Links.
	run("rates and clients per entity",
		click(`#nav a[href="#/entities"]`),
		until(`parseFloat(`+rowCell("traffic", 6)+`) > 0 && parseFloat(`+rowCell("traffic", 7)+`) > 0`, "traffic shows messages in and out per second"),
		until(rowCell("traffic", 8)+` === '1' && `+rowCell("traffic", 9)+` === '2'`, "traffic shows one connection with two links"),
		until(`['0.0/s', '–'].includes(`+rowCell("fragile", 6)+`) && `+rowCell("fragile", 8)+` === '0'`, "an idle queue shows no traffic and no clients"),
		screenshot(dir, "entities-rates"))
	run("rates and clients per node",
		click(`#nav a[href="#/overview"]`),
		until(`(() => {
			const r = [...document.querySelectorAll('#node-rates tbody tr')];
			return r.length === 3 && r.some((x) => parseFloat(x.cells[2].textContent) > 0) && r[0].cells[4].textContent !== '0';
		})()`, "three nodes, one with messages in per second and n1 with connections"),
		until(text(`#problems-h`)+` === 'Problems'`, "no problems while all is well"))

	// The dead-letter queue of "fragile" grows: a message dead-lettered every 500 ms.
	dlq, err := client.NewReceiverForQueue("fragile", nil)
	if err != nil {
		t.Fatal(err)
	}
	fsender, err := client.NewSender("fragile", nil)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for traffic.Err() == nil {
			if err := fsender.SendMessage(traffic, &azservicebus.Message{Body: []byte("bad")}, nil); err != nil {
				return
			}
			msgs, err := dlq.ReceiveMessages(traffic, 1, nil)
			if err != nil {
				return
			}
			for _, m := range msgs {
				_ = dlq.DeadLetterMessage(traffic, m, nil)
			}
			select {
			case <-traffic.Done():
			case <-time.After(500 * time.Millisecond): // a steady trickle, not a burst
			}
		}
	})
	run("a growing dead-letter queue is a problem",
		until(`!!document.querySelector('#problems li[data-kind="dlq-growing"]')`, "the overview lists the growing dead-letter queue"),
		until(`document.querySelector('#problems li[data-kind="dlq-growing"]').textContent.includes('fragile')`, "it names fragile"),
		click(`#nav a[href="#/entities"]`),
		until(`document.querySelector('tr[data-entity="fragile"]')?.classList.contains('problem') && `+rowCell("fragile", 4)+`.includes('▲')`,
			"the fragile row is highlighted, its dead-letter count marked growing"),
		screenshot(dir, "entities-dlq-growing"))

	// A node stops answering.
	n3.Pause()
	defer n3.Resume()
	run("a dead node, its unreachable replicas, under-replicated partitions",
		click(`#nav a[href="#/overview"]`),
		until(`!!document.querySelector('#problems li[data-kind="dead-node"]') && document.querySelector('#problems li[data-kind="dead-node"]').textContent.includes('n3')`,
			"the overview lists n3 as dead or not answering"),
		until(`!!document.querySelector('#problems li[data-kind="unreachable-replica"]') && !!document.querySelector('#problems li[data-kind="under-replicated"]')`,
			"the overview lists n3's replicas unreachable and their partitions under-replicated"),
		until(`[...document.querySelectorAll('#node-rates tbody tr')].some((r) => r.cells[0].textContent === 'n3' && r.classList.contains('problem'))`,
			"n3's row is highlighted"),
		screenshot(dir, "overview-problems"),
		click(`#nav a[href="#/cluster"]`),
		until(`[...document.querySelectorAll('#partitions .replica.bad')].some((r) => r.textContent.startsWith('n3') && r.textContent.includes('unreachable'))`,
			"the cluster view marks n3's replicas unreachable"),
		screenshot(dir, "cluster-problems"))
}
