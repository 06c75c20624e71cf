package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// buildBinaries builds cmd/quorumbus and cmd/qbctl as `make image` does.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", dir+"/", "./cmd/quorumbus", "./cmd/qbctl")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// The tarball make image writes, unpacked into an empty directory, runs: the server as
// user 65532 chrooted into it, with the root read-only and only the data volume
// writable, serves /readyz; qbctl from the image reaches it.
func TestImageRunsAsItsUserInAFreshReadOnlyRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for chroot, bind mounts and setuid")
	}
	bin := buildBinaries(t)
	for _, b := range []string{"quorumbus", "qbctl"} {
		f, err := elf.Open(filepath.Join(bin, b))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked; the image has no libc", b)
			}
		}
		f.Close()
	}
	path := filepath.Join(t.TempDir(), "quorumbus-image.tar")
	if err := Write(path, "quorumbus:test", Options{BinDir: bin, Arch: runtime.GOARCH, Version: "test"}); err != nil {
		t.Fatal(err)
	}
	checkDockerSaveLayout(t, path)
	// containers/image, which podman load and skopeo use, reads it too (when installed).
	if skopeo, err := exec.LookPath("skopeo"); err == nil {
		if out, err := exec.Command(skopeo, "inspect", "docker-archive:"+path).CombinedOutput(); err != nil {
			t.Fatalf("skopeo inspect: %v\n%s", err, out)
		}
	} else {
		t.Log("skopeo not installed: the tarball is not read by containers/image here")
	}

	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	ports := make([]string, 0, len(c.ExposedPorts))
	for p := range c.ExposedPorts {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{Server}) || len(c.Volumes) != 1 ||
		c.Volumes[DataDir] != struct{}{} || strings.Join(ports, " ") != "5300/tcp 5400/tcp 5400/udp 5671/tcp 5672/tcp" ||
		c.Labels["org.opencontainers.image.source"] == "" {
		t.Fatalf("image config: %+v", c)
	}

	root := t.TempDir()
	unpack(t, mutate.Extract(img), root)
	if fi, err := os.Stat(filepath.Join(root, DataDir)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != UID {
		t.Fatalf("data directory not owned by %d: %v", UID, err)
	}
	readOnlyRootWithVolume(t, root)

	uidPorts := []string{"--amqp-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--cluster-addr", "127.0.0.1:0"}
	var log bytes.Buffer
	node := exec.Command(c.Entrypoint[0], append(append([]string{}, c.Cmd...), uidPorts...)...)
	node.Env = c.Env
	node.Dir = c.WorkingDir
	node.Stdout, node.Stderr = &log, &log
	node.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: UID, Gid: UID},
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	t.Cleanup(func() {
		node.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			node.Process.Kill()
			<-exited
		}
	})

	var ep struct{ Admin string }
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(root, DataDir, "endpoints.json"))
		if err == nil && json.Unmarshal(b, &ep) == nil && ep.Admin != "" {
			resp, err := http.Get("http://" + ep.Admin + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("quorumbus exited in the image root: %v\n%s", err, log.String())
		case <-time.After(50 * time.Millisecond): // polling another process
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /readyz within 60s\n%s", log.String())
		}
	}

	// qbctl from the image, as the same user, finds the node's connection string
	// through QUORUMBUS_DATA and signs an admin request with it.
	cli := exec.Command(CLI, "--admin-addr", ep.Admin, "status")
	cli.Env = c.Env
	cli.Dir = "/"
	cli.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: UID, Gid: UID}}
	out, err := cli.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namespace") || strings.Contains(string(out), "error") {
		t.Fatalf("qbctl status in the image: %v\n%s", err, out)
	}

	// The root really is read-only for the node's user; the volume is not.
	if err := os.WriteFile(filepath.Join(root, "etc", "x"), nil, 0o600); err == nil || !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing into the image root: %v, want EROFS", err)
	}
}

// checkDockerSaveLayout checks what docker load, podman load, kind load image-archive
// and ctr import read: manifest.json naming the config, the tag and the layers, each
// present in the tarball.
func checkDockerSaveLayout(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"quorumbus:test"}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json: %+v", manifest)
	}
	for _, name := range append([]string{manifest[0].Config}, manifest[0].Layers...) {
		if files[name] == nil {
			t.Fatalf("manifest.json names %s, which the tarball lacks", name)
		}
	}
}

// unpack writes the flattened image filesystem into root with its owners and modes.
func unpack(t *testing.T, rc io.ReadCloser, root string) {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeReg:
			var f *os.File
			f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm)
			if err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		default:
			err = fmt.Errorf("unexpected entry type %c", h.Typeflag)
		}
		if err == nil {
			err = os.Chown(dst, h.Uid, h.Gid)
		}
		if err == nil {
			err = os.Chmod(dst, os.FileMode(h.Mode)&os.ModePerm)
		}
		if err != nil {
			t.Fatalf("unpack %s: %v", h.Name, err)
		}
	}
}

// readOnlyRootWithVolume makes root a read-only bind mount with a fresh writable
// directory, owned by the image's user, mounted over the data volume: what a pod with
// readOnlyRootFilesystem and a PersistentVolumeClaim gives the container.
func readOnlyRootWithVolume(t *testing.T, root string) {
	t.Helper()
	vol := t.TempDir()
	if err := os.Chown(vol, UID, UID); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(root, DataDir)
	steps := []struct {
		src, dst string
		flags    uintptr
	}{
		{root, root, syscall.MS_BIND},
		{vol, data, syscall.MS_BIND},
		{"", root, syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY},
	}
	for _, s := range steps {
		if err := syscall.Mount(s.src, s.dst, "", s.flags, ""); err != nil {
			t.Fatalf("mount %s on %s: %v", s.src, s.dst, err)
		}
	}
	t.Cleanup(func() {
		syscall.Unmount(data, syscall.MNT_DETACH)
		syscall.Unmount(root, syscall.MNT_DETACH)
	})
}

// deploy/Dockerfile, which no test here can build (no Docker), says what the tarball's
// config says.
func TestDockerfileMatchesTheImage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"\nFROM scratch\n",
		"CGO_ENABLED=0",
		"\nUSER 65532:65532\n",
		"\nEXPOSE 5672 5671 5300 5400 5400/udp\n",
		"\nVOLUME " + DataDir + "\n",
		"\nWORKDIR " + DataDir + "\n",
		`ENTRYPOINT ["` + Server + `"]`,
		"QUORUMBUS_DATA=" + DataDir, "QUORUMBUS_AMQP_ADDR=0.0.0.0:5672", "QUORUMBUS_ADMIN_ADDR=0.0.0.0:5300",
		"./cmd/quorumbus ./cmd/qbctl",
		"chown 65532:65532 /rootfs" + DataDir,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
}
