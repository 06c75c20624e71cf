package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// The cluster commands use the node's JSON cluster API (/$cluster/, docs/admin-api.md),
// which the Service Bus admin client does not know. The types below mirror its JSON; a
// test checks them against cluster/admin's (qbctl imports no broker package but
// cluster/meta's property table).

type clusterStatus struct {
	NodeID         string   `json:"nodeId"`
	MetadataLeader string   `json:"metadataLeader"`
	Members        []member `json:"members"`
}

type member struct {
	ID           string `json:"id"`
	ClusterAddr  string `json:"clusterAddr"`
	AMQPAddr     string `json:"amqpAddr"`
	AdminAddr    string `json:"adminAddr"`
	Zone         string `json:"zone"`
	State        string `json:"state"`
	MetadataRole string `json:"metadataRole"`
	Replicas     int    `json:"replicas"`
	Leading      int    `json:"leading"`
	// with --digests
	MetadataDigest  string `json:"metadataDigest,omitempty"`
	MetadataApplied uint64 `json:"metadataApplied,omitempty"`
}

type partitionStatus struct {
	Entity   string          `json:"entity"`
	Index    int             `json:"index"`
	GroupID  uint32          `json:"groupId"`
	Leader   string          `json:"leader"`
	Replicas []replicaStatus `json:"replicas"`
	// WantReplicas: --replicas capped by the registered nodes; UnderReplicated: fewer of
	// the group's voters are alive.
	WantReplicas    int  `json:"wantReplicas"`
	UnderReplicated bool `json:"underReplicated"`
}

type replicaStatus struct {
	Node      string `json:"node"`
	Voter     bool   `json:"voter"`
	LastIndex uint64 `json:"lastIndex"`
	Lag       uint64 `json:"lag"`
	Digest    string `json:"digest,omitempty"`
	// Unreachable: the node did not answer; LastIndex and Lag say nothing then.
	Unreachable bool `json:"unreachable,omitempty"`
}

type rebalanceStatus struct {
	NodeID       string          `json:"nodeId"`
	MaxMoves     int             `json:"maxMoves"`
	Moves        []rebalanceMove `json:"moves"`
	Nodes        []rebalanceNode `json:"nodes"`
	EvenReplicas float64         `json:"evenReplicas"`
	EvenLeading  float64         `json:"evenLeading"`
	Balanced     bool            `json:"balanced"`
	Done         bool            `json:"done"`
}

type rebalanceMove struct {
	Entity     string   `json:"entity"`
	Index      int      `json:"index"`
	GroupID    uint32   `json:"groupId"`
	Joining    []string `json:"joining,omitempty"`
	CatchingUp []string `json:"catchingUp,omitempty"`
	Leaving    []string `json:"leaving,omitempty"`
}

type rebalanceNode struct {
	ID           string `json:"id"`
	Zone         string `json:"zone,omitempty"`
	State        string `json:"state"`
	Replicas     int    `json:"replicas"`
	Leading      int    `json:"leading"`
	ReplicasEven bool   `json:"replicasEven"`
	LeadingEven  bool   `json:"leadingEven"`
}

// apiError is the cluster API's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (g *globals) clusterCmd() *cobra.Command {
	status := &cobra.Command{Use: "status", Short: "the members of the cluster and the metadata leader", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error { return g.clusterStatus(c.Context()) }}
	status.Flags().BoolVar(&g.digests, "digests", false, "also show each member's metadata state digest and applied index (equal on every member: converged)")
	partitions := &cobra.Command{Use: "partitions", Short: "every partition group: leader, replicas and their lag", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error { return g.clusterPartitions(c.Context()) }}
	partitions.Flags().BoolVar(&g.digests, "digests", false, "also show each replica's state digest (equal digests: converged replicas)")
	rebalance := group("rebalance", "replicas and leaderships moving toward an even share per node: status", nil,
		&cobra.Command{Use: "status", Short: "moves under way, and each node's replicas and leaderships against an even share", Args: nArgs(),
			RunE: func(c *cobra.Command, _ []string) error { return g.rebalanceStatus(c.Context()) }})
	return group("cluster", "members and partition groups of the cluster: status, partitions, rebalance", nil, status, partitions, rebalance)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (g *globals) rebalanceStatus(ctx context.Context) error {
	var st rebalanceStatus
	if err := g.clusterAPI(ctx, http.MethodGet, "/$cluster/rebalance", "rebalance status", &st); err != nil {
		return err
	}
	if g.output == "json" {
		nodes := make([]map[string]any, 0, len(st.Nodes))
		for _, n := range st.Nodes {
			nodes = append(nodes, map[string]any{"ID": n.ID, "Zone": n.Zone, "State": n.State, "Replicas": n.Replicas,
				"Leading": n.Leading, "ReplicasEven": n.ReplicasEven, "LeadingEven": n.LeadingEven})
		}
		moves := make([]map[string]any, 0, len(st.Moves))
		for _, m := range st.Moves {
			moves = append(moves, map[string]any{"Entity": m.Entity, "Partition": m.Index, "GroupID": m.GroupID,
				"Joining": nonNil(m.Joining), "CatchingUp": nonNil(m.CatchingUp), "Leaving": nonNil(m.Leaving)})
		}
		return g.printJSON(map[string]any{"NodeID": st.NodeID, "MaxMoves": st.MaxMoves, "EvenReplicas": st.EvenReplicas,
			"EvenLeading": st.EvenLeading, "Balanced": st.Balanced, "Done": st.Done, "Nodes": nodes, "Moves": moves})
	}
	state := "done: every node holds an even share (within 20 %) and nothing moves"
	switch {
	case len(st.Moves) > 0:
		state = fmt.Sprintf("in progress: %d group(s) changing membership", len(st.Moves))
	case !st.Balanced:
		state = "not balanced, no move under way (a node draining or down, a group under-replicated, zones, or --rebalance-moves 0)"
	}
	fmt.Fprintf(g.stdout, "rebalance: %s (as seen by %s; --rebalance-moves %d)\n", state, st.NodeID, st.MaxMoves)
	fmt.Fprintf(g.stdout, "even share: %.1f replicas, %.1f leaderships per node\n\n", st.EvenReplicas, st.EvenLeading)
	mark := func(ok bool, state string) string {
		switch {
		case state != "up":
			return "-"
		case ok:
			return "yes"
		}
		return "NO"
	}
	nodes := &table{header: []string{"NODE", "STATE", "ZONE", "REPLICAS", "EVEN", "LEADING", "EVEN"}}
	for _, n := range st.Nodes {
		nodes.add(n.ID, n.State, n.Zone, n.Replicas, mark(n.ReplicasEven, n.State), n.Leading, mark(n.LeadingEven, n.State))
	}
	if err := g.print(nodes); err != nil {
		return err
	}
	if len(st.Moves) == 0 {
		return nil
	}
	fmt.Fprintln(g.stdout)
	moves := &table{header: []string{"ENTITY", "PARTITION", "GROUP", "JOINING", "CATCHING UP", "LEAVING"}}
	for _, m := range st.Moves {
		moves.add(m.Entity, m.Index, m.GroupID, strings.Join(m.Joining, ","), strings.Join(m.CatchingUp, ","), strings.Join(m.Leaving, ","))
	}
	return g.print(moves)
}

func (g *globals) clusterStatus(ctx context.Context) error {
	var st clusterStatus
	path := "/$cluster/status"
	if g.digests {
		path += "?digests=true"
	}
	if err := g.clusterAPI(ctx, http.MethodGet, path, "cluster status", &st); err != nil {
		return err
	}
	t := &table{header: []string{"ID", "STATE", "ZONE", "METADATA", "REPLICAS", "LEADING", "CLUSTER ADDR", "AMQP ADDR"},
		jsonKeys: []string{"ID", "State", "Zone", "MetadataRole", "Replicas", "Leading", "ClusterAddr", "AMQPAddr"}}
	if g.digests {
		t.header = append(t.header, "METADATA APPLIED", "METADATA DIGEST")
		t.jsonKeys = append(t.jsonKeys, "MetadataApplied", "MetadataDigest")
	}
	for _, m := range st.Members {
		row := []any{m.ID, m.State, m.Zone, m.MetadataRole, m.Replicas, m.Leading, m.ClusterAddr, m.AMQPAddr}
		if g.digests {
			row = append(row, m.MetadataApplied, m.MetadataDigest)
		}
		t.add(row...)
	}
	if g.output == "json" {
		rows := t.jsonRows()
		for i, m := range st.Members {
			rows[i]["AdminAddr"] = m.AdminAddr
		}
		return g.printJSON(map[string]any{"NodeID": st.NodeID, "MetadataLeader": st.MetadataLeader, "Members": rows})
	}
	leader := st.MetadataLeader
	if leader == "" {
		leader = "none (no quorum?)"
	}
	fmt.Fprintf(g.stdout, "metadata leader: %s (as seen by %s)\n", leader, st.NodeID)
	return g.print(t)
}

func (g *globals) clusterPartitions(ctx context.Context) error {
	var ps []partitionStatus
	path := "/$cluster/partitions"
	if g.digests {
		path += "?digests=true"
	}
	if err := g.clusterAPI(ctx, http.MethodGet, path, "cluster partitions", &ps); err != nil {
		return err
	}
	t := &table{header: []string{"ENTITY", "PARTITION", "GROUP", "LEADER", "REPLICAS", "UNDER REPLICATED"},
		jsonKeys: []string{"Entity", "Partition", "GroupID", "Leader", "Replicas", "UnderReplicated"}}
	if g.digests && g.output != "json" {
		t.header = append(t.header, "DIGESTS")
	}
	for _, p := range ps {
		if g.output == "json" {
			reps := make([]map[string]any, 0, len(p.Replicas))
			for _, r := range p.Replicas {
				rep := map[string]any{"Node": r.Node, "Voter": r.Voter, "LastIndex": r.LastIndex, "Lag": r.Lag}
				if r.Digest != "" {
					rep["Digest"] = r.Digest
				}
				if r.Unreachable {
					rep["Unreachable"] = true
				}
				reps = append(reps, rep)
			}
			t.add(p.Entity, p.Index, p.GroupID, p.Leader, reps, p.UnderReplicated)
			continue
		}
		under := "no"
		if p.UnderReplicated {
			under = "YES (wants " + strconv.Itoa(p.WantReplicas) + ")"
		}
		row := []any{p.Entity, p.Index, p.GroupID, p.Leader, replicaCell(p), under}
		if g.digests {
			row = append(row, digestCell(p))
		}
		t.add(row...)
	}
	return g.print(t)
}

// digestCell lists each replica's state digest, shortened to 12 hex digits (equal
// digests: converged replicas): "n1 3fa9c2e01b7d, n2 3fa9c2e01b7d, n3 -".
func digestCell(p partitionStatus) string {
	cells := make([]string, 0, len(p.Replicas))
	for _, r := range p.Replicas {
		d := r.Digest
		if d == "" {
			d = "-" // the node did not answer
		} else if len(d) > 12 {
			d = d[:12]
		}
		cells = append(cells, r.Node+" "+d)
	}
	return strings.Join(cells, ", ")
}

// replicaCell lists a group's replicas, each but the leader with its lag, and a
// replica whose node did not answer as unreachable (its lag is unknown, not 0):
// "n1, n2 (lag 0), n3 (nonvoter, lag 12), n4 (unreachable)".
func replicaCell(p partitionStatus) string {
	cells := make([]string, 0, len(p.Replicas))
	for _, r := range p.Replicas {
		var notes []string
		if !r.Voter {
			notes = append(notes, "nonvoter")
		}
		switch {
		case r.Unreachable:
			notes = append(notes, "unreachable")
		case r.Node != p.Leader:
			notes = append(notes, "lag "+strconv.FormatUint(r.Lag, 10))
		}
		c := r.Node
		if len(notes) > 0 {
			c += " (" + strings.Join(notes, ", ") + ")"
		}
		cells = append(cells, c)
	}
	return strings.Join(cells, ", ")
}

func (g *globals) nodeCmd() *cobra.Command {
	verb := func(name, short string) *cobra.Command {
		var self bool
		c := &cobra.Command{Use: name + " NODE|--self", Short: short,
			Args: func(c *cobra.Command, pos []string) error {
				if self == (len(pos) == 1) || len(pos) > 1 || (len(pos) == 1 && pos[0] == "") {
					return usageErr(c.CommandPath(), "node %s takes one node ID, or --self", name)
				}
				return nil
			},
			RunE: func(c *cobra.Command, pos []string) error { return g.nodeVerb(c.Context(), name, self, pos) }}
		c.Flags().BoolVar(&self, "self", false, "the node at --admin-addr, whatever its ID (for a Kubernetes preStop hook, which cannot expand $(POD_NAME))")
		return c
	}
	return group("node", "cluster members: drain, undrain, remove", []string{"nodes"},
		verb("drain", "move every leadership away from a node and stop new placements on it"),
		verb("undrain", "let a drained node take new placements and lead its groups again (a restart does the same)"),
		verb("remove", "remove a node for good: its replicas are placed on other nodes first"))
}

func (g *globals) nodeVerb(ctx context.Context, verb string, self bool, pos []string) error {
	var id string
	if self {
		var st clusterStatus
		if err := g.clusterAPI(ctx, http.MethodGet, "/$cluster/status", "node "+verb+" --self", &st); err != nil {
			return err
		}
		id = st.NodeID
	} else {
		id = pos[0]
	}
	path := "/$cluster/nodes/" + url.PathEscape(id)
	method, done := http.MethodDelete, "removed from the cluster: its replicas were placed on other nodes"
	switch verb {
	case "drain":
		path += "/drain"
		method, done = http.MethodPost, "draining: leaderships and new placements move to other nodes"
	case "undrain":
		path += "/undrain"
		method, done = http.MethodPost, "no longer draining: it takes new placements, and its groups' leaderships move back to it"
	}
	if err := g.clusterAPI(ctx, method, path, "node "+verb+" "+id, nil); err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(map[string]any{"Node": id, "Action": verb, "OK": true})
	}
	fmt.Fprintf(g.stdout, "node %s %s\n", id, done)
	return nil
}

func (g *globals) partitionCmd() *cobra.Command {
	var to string
	transfer := &cobra.Command{Use: "transfer-leader GROUP [--to NODE]", Short: "move one partition group's leadership",
		Args: nArgs("GROUP"),
		RunE: func(c *cobra.Command, pos []string) error {
			group, err := strconv.ParseUint(pos[0], 10, 32)
			if err != nil {
				return withHint(fmt.Errorf("%w: GROUP %q is not a partition group number", errUsage, pos[0]),
					"the GROUP column of 'qbctl cluster partitions' lists them")
			}
			return g.transferLeader(c.Context(), uint32(group), to)
		}}
	transfer.Flags().StringVar(&to, "to", "", "the node to lead the group (default: any other voter)")
	return group("partition", "partition groups: transfer-leader", []string{"partitions"}, transfer)
}

func (g *globals) transferLeader(ctx context.Context, group uint32, to string) error {
	path := "/$cluster/partitions/" + strconv.FormatUint(uint64(group), 10) + "/transfer-leader"
	if to != "" {
		path += "?to=" + url.QueryEscape(to)
	}
	if err := g.clusterAPI(ctx, http.MethodPost, path, "transfer-leader of group "+strconv.FormatUint(uint64(group), 10), nil); err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(map[string]any{"GroupID": group, "To": to, "OK": true})
	}
	if to == "" {
		to = "another voter"
	}
	fmt.Fprintf(g.stdout, "leadership of group %d moved to %s\n", group, to)
	return nil
}

// clusterAPI sends one signed request to the cluster API and decodes a JSON answer into
// out (nil: none expected). what names the operation in errors.
func (g *globals) clusterAPI(ctx context.Context, method, path, what string, out any) error {
	cs, err := g.connectionString()
	if err != nil {
		return err
	}
	auth, err := sasToken(cs, time.Now().Add(time.Hour))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, g.adminURL(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	hc := g.httpClient(2 * time.Minute) // a drain or remove moves replicas
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: cannot reach the admin API at %s (--admin-addr): %v", what, g.adminAddr, unwrapURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %v", what, err)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return g.unauthorized(what, resp.StatusCode, apiMessage(body))
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", what, describeAPIError(resp.StatusCode, body, g.adminAddr))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: the node at %s answered something that is not the cluster API's JSON: %v", what, g.adminAddr, err)
	}
	return nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// apiMessage is the message of a cluster API error body, or the start of a body that
// is not one.
func apiMessage(body []byte) string {
	var e apiError
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		msg = e.Message
	} else if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return msg
}

// describeAPIError turns an error answer (but a 401, see unauthorized) into a sentence
// for an operator.
func describeAPIError(code int, body []byte, addr string) string {
	var e apiError
	_ = json.Unmarshal(body, &e)
	msg := apiMessage(body)
	switch {
	case code == http.StatusNotFound && strings.Contains(msg, "without a cluster"):
		return fmt.Sprintf("the node at %s runs without a cluster, so it has no cluster API", addr)
	case code == http.StatusNotFound && e.Message == "":
		return fmt.Sprintf("the node at %s has no cluster API (an older quorumbus?): %d %s", addr, code, msg)
	case code == http.StatusNotFound:
		return "not found: " + msg
	case code == http.StatusBadRequest:
		return "rejected: " + msg
	case code == http.StatusServiceUnavailable:
		return "the cluster cannot do this now, try again: " + msg
	}
	return fmt.Sprintf("the node answered %d: %s", code, msg)
}

// sasToken signs a SharedAccessSignature for the whole namespace of connection string
// cs, valid until exp, the way the Service Bus SDKs do (docs/admin-api.md
// § Authentication). A connection string that carries a SharedAccessSignature uses it.
func sasToken(cs string, exp time.Time) (string, error) {
	var endpoint, keyName, key, sas string
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch strings.ToLower(k) {
		case "endpoint":
			endpoint = v
		case "sharedaccesskeyname":
			keyName = v
		case "sharedaccesskey":
			key = v
		case "sharedaccesssignature":
			sas = v
		}
	}
	if sas != "" {
		return sas, nil
	}
	if endpoint == "" || keyName == "" || key == "" {
		return "", errors.New("the connection string needs Endpoint, SharedAccessKeyName and SharedAccessKey")
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("the connection string's Endpoint %q is not sb://HOST", endpoint)
	}
	sr := url.QueryEscape("sb://" + strings.ToLower(u.Host))
	se := strconv.FormatInt(exp.Unix(), 10)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(sr + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(m.Sum(nil)))
	return "SharedAccessSignature sr=" + sr + "&sig=" + sig + "&se=" + se + "&skn=" + keyName, nil
}
