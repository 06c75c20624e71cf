package cluster

import (
	"net"
	"net/rpc"
	"sync"
	"testing"
	"time"
)

type echoSvc struct{}

func (echoSvc) Echo(req *CallReq, resp *CallResp) error {
	resp.Seqs = []int64{int64(req.Max)}
	return nil
}

// Many concurrent calls over the coalescing codecs all get their own reply: the writer
// swaps buffers under load without corrupting the gob stream.
func TestCodecsConcurrentCalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	srv := rpc.NewServer()
	srv.RegisterName("E", echoSvc{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		srv.ServeCodec(newServerCodec(c, &wg))
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cl := rpc.NewClientWithCodec(newClientCodec(conn, &wg))
	payload := make([]byte, 1100)
	var callers sync.WaitGroup
	for g := 0; g < 256; g++ {
		callers.Add(1)
		go func(g int) {
			defer callers.Done()
			for i := 0; i < 200; i++ {
				var resp CallResp
				call := cl.Go("E.Echo", &CallReq{Max: g*1000 + i, State: payload}, &resp, make(chan *rpc.Call, 1))
				select {
				case c := <-call.Done:
					if c.Error != nil || len(resp.Seqs) != 1 || resp.Seqs[0] != int64(g*1000+i) {
						t.Errorf("call %d/%d: %v %v", g, i, c.Error, resp.Seqs)
						return
					}
				case <-time.After(10 * time.Second):
					t.Errorf("call %d/%d: no reply in 10 s", g, i)
					return
				}
			}
		}(g)
	}
	callers.Wait()
	cl.Close()
	wg.Wait()
}
