package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
)

// BenchmarkGetQueue measures one authenticated GET of a queue through the handler
// (token check, metadata read, runtime counts, XML), without the network.
func BenchmarkGetQueue(b *testing.B) {
	st := &memStore{st: meta.New(), counts: map[admin.Entity]admin.RuntimeCounts{}}
	st.now = (&clock{}).Now
	for _, c := range []meta.Command{
		&meta.SetNamespace{Name: "ns"},
		&meta.PutSASKey{Key: meta.SASKey{Name: rootName, PrimaryKey: rootKey, Rights: meta.RightManage | meta.RightSend | meta.RightListen}},
		&meta.CreateQueue{Name: "q", Properties: meta.DefaultQueueProperties()},
	} {
		if err := st.Apply(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	cfg := admin.DefaultConfig()
	cfg.Store = st
	h, err := admin.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	auth := sign("https://127.0.0.1:5672/q?api-version=2024-05", rootName, rootKey)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:5300/q?api-version=2024-05", nil)
		req.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}

// BenchmarkListQueues lists 100 queues in one page.
func BenchmarkListQueues(b *testing.B) {
	st := &memStore{st: meta.New(), counts: map[admin.Entity]admin.RuntimeCounts{}}
	st.now = (&clock{}).Now
	_ = st.Apply(ctx, &meta.PutSASKey{Key: meta.SASKey{Name: rootName, PrimaryKey: rootKey, Rights: meta.RightManage | meta.RightSend | meta.RightListen}})
	for i := range 100 {
		if err := st.Apply(ctx, &meta.CreateQueue{Name: "q" + strconv.Itoa(i), Properties: meta.DefaultQueueProperties()}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := admin.DefaultConfig()
	cfg.Store = st
	h, _ := admin.New(cfg)
	auth := sign("https://127.0.0.1:5672/$Resources/Queues?api-version=2024-05", rootName, rootKey)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:5300/$Resources/Queues?api-version=2024-05", nil)
		req.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
