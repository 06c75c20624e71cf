package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// The error Detail an SDK user reads says what Service Bus says ("The messaging entity
// '…' already exists"), never a package's sentinel text ("meta: entity already exists").
func TestErrorDetailsUseServiceBusWords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.ac.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	var errs []error
	_, err := e.ac.CreateQueue(ctx, "jobs", nil)
	wantStatus(t, err, http.StatusConflict, "The messaging entity 'jobs' already exists")
	errs = append(errs, err)
	_, err = e.ac.CreateSubscription(ctx, "no-topic", "s", nil)
	wantStatus(t, err, http.StatusNotFound, "was not found")
	errs = append(errs, err)
	if _, err := e.ac.CreateTopic(ctx, "events", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ac.CreateSubscription(ctx, "events", "eu", nil); err != nil {
		t.Fatal(err)
	}
	_, err = e.ac.CreateSubscription(ctx, "events", "eu", nil)
	wantStatus(t, err, http.StatusConflict, "The messaging entity 'events/Subscriptions/eu' already exists")
	errs = append(errs, err)
	_, err = e.ac.DeleteQueue(ctx, "nosuch", nil)
	wantStatus(t, err, http.StatusNotFound, "nosuch")
	errs = append(errs, err)
	for _, msg := range []string{"meta:", "cluster:"} {
		for _, err := range errs {
			if strings.Contains(err.Error(), msg) {
				t.Errorf("the answer carries an internal prefix %q: %v", msg, err)
			}
		}
	}
}
