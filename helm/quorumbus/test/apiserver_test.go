package charttest

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// apiServer is the part of a Kubernetes API server that the chart's lookups reach, over
// HTTP as Helm's lookup function does (discovery of v1, then GET or LIST of Secrets):
// the Secrets of the release's namespace. It is Helm's RESTClientGetter too.
type apiServer struct {
	srv *httptest.Server
	mu  sync.Mutex
	// secrets by name, in namespace; guarded by mu.
	secrets map[string]corev1.Secret
}

func newAPIServer(secrets ...corev1.Secret) *apiServer {
	a := &apiServer{secrets: map[string]corev1.Secret{}}
	for _, s := range secrets {
		a.secrets[s.Name] = s
	}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

func (a *apiServer) Close() { a.srv.Close() }

func (a *apiServer) put(s corev1.Secret) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.secrets[s.Name] = s
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	notFound := func() {
		reply(http.StatusNotFound, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: r.URL.Path + " not found"})
	}
	if r.Method != http.MethodGet {
		reply(http.StatusMethodNotAllowed, metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed})
		return
	}
	prefix := "/api/v1/namespaces/" + namespace + "/secrets"
	switch {
	case r.URL.Path == "/api/v1":
		reply(http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
			APIResources: []metav1.APIResource{{Name: "secrets", Namespaced: true, Kind: "Secret", Verbs: metav1.Verbs{"get", "list"}}}})
	case r.URL.Path == prefix:
		list := corev1.SecretList{TypeMeta: metav1.TypeMeta{Kind: "SecretList", APIVersion: "v1"}, Items: []corev1.Secret{}}
		for _, s := range a.secrets {
			list.Items = append(list.Items, s)
		}
		reply(http.StatusOK, list)
	case strings.HasPrefix(r.URL.Path, prefix+"/"):
		s, ok := a.secrets[strings.TrimPrefix(r.URL.Path, prefix+"/")]
		if !ok {
			notFound()
			return
		}
		s.TypeMeta = metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}
		reply(http.StatusOK, s)
	default:
		notFound()
	}
}

func (a *apiServer) ToRESTConfig() (*rest.Config, error) { return &rest.Config{Host: a.srv.URL}, nil }

func (a *apiServer) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return nil, errors.New("apiServer: no discovery client (the chart tests render with fixed capabilities)")
}

func (a *apiServer) ToRESTMapper() (meta.RESTMapper, error) {
	return nil, errors.New("apiServer: no REST mapper")
}
