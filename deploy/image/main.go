// Command image writes the Quorumbus container image as a tarball, without Docker: one
// layer holding the two static binaries, a passwd and group file naming the non-root
// user 65532, and the data directory /var/lib/quorumbus owned by that user; nothing
// else (no shell, no libc). The tarball is in `docker save` form, which docker load,
// podman load, kind load image-archive and ctr images import all accept.
//
//	go run ./deploy/image -bin bin/linux-amd64 -tag quorumbus:dev -o bin/quorumbus-image.tar
//
// `make image` builds the binaries (CGO_ENABLED=0) and runs it. deploy/Dockerfile is the
// same image for users who build with Docker or Buildah; image_test.go runs the image.
// This is its own module so that go-containerregistry stays out of the broker's.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Facts about the image that the Dockerfile, the chart and the tests repeat.
const (
	UID      = 65532 // the distroless "nonroot" user
	DataDir  = "/var/lib/quorumbus"
	BinDir   = "/usr/local/bin"
	Server   = BinDir + "/quorumbus"
	CLI      = BinDir + "/qbctl"
	userName = "nonroot"
)

// Options says what to put in the image.
type Options struct {
	BinDir   string // holds quorumbus and qbctl, built for Arch
	Arch     string // GOARCH of the binaries
	Version  string // org.opencontainers.image.version
	Revision string // org.opencontainers.image.revision
	Created  time.Time
}

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	layer, err := rootLayer(o)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Author = "Quorumbus"
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint: []string{Server},
		WorkingDir: DataDir,
		// The node defaults to loopback, which nothing outside a container can reach;
		// qbctl run in the container reads the same variables (QUORUMBUS_DATA finds the
		// node's connection-string file).
		Env: []string{
			"QUORUMBUS_DATA=" + DataDir,
			"QUORUMBUS_AMQP_ADDR=0.0.0.0:5672",
			"QUORUMBUS_ADMIN_ADDR=0.0.0.0:5300",
		},
		ExposedPorts: map[string]struct{}{
			"5672/tcp": {}, "5671/tcp": {}, "5300/tcp": {}, "5400/tcp": {}, "5400/udp": {},
		},
		Volumes:    map[string]struct{}{DataDir: {}},
		StopSignal: "SIGTERM",
		Labels: map[string]string{
			"org.opencontainers.image.title":       "quorumbus",
			"org.opencontainers.image.description": "Azure Service Bus compatible broker cluster (AMQP 1.0)",
			"org.opencontainers.image.source":      "https://github.com/quorumbus/quorumbus",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootLayer is the image's only layer, with fixed timestamps so that the same binaries
// give the same layer digest.
func rootLayer(o Options) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := o.Created
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mt})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mt}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"etc", "usr", "usr/local", "usr/local/bin", "var", "var/lib"} {
		if err := dir(d, 0o755, 0); err != nil {
			return nil, err
		}
	}
	if err := dir(DataDir[1:], 0o750, UID); err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", userName, UID, UID, userName, DataDir)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, UID)
	if err := file("etc/passwd", 0o644, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte(group)); err != nil {
		return nil, err
	}
	for _, bin := range []string{Server, CLI} {
		data, err := os.ReadFile(filepath.Join(o.BinDir, filepath.Base(bin)))
		if err != nil {
			return nil, err
		}
		if err := file(bin[1:], 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// Write builds the image and writes it to path as a `docker save` tarball tagged tag.
func Write(path, tag string, o Options) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := tarball.Write(ref, img, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func main() {
	var o Options
	out := flag.String("o", "quorumbus-image.tar", "the tarball to write")
	tag := flag.String("tag", "quorumbus:dev", "the image's name and tag in the tarball")
	flag.StringVar(&o.BinDir, "bin", "", "directory holding the static quorumbus and qbctl binaries")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH the binaries were built for")
	flag.StringVar(&o.Version, "version", "dev", "image version label")
	flag.StringVar(&o.Revision, "revision", "", "image revision label (git commit)")
	epoch := flag.Int64("created", 0, "creation time, Unix seconds (default: SOURCE_DATE_EPOCH, else 0, for reproducible images)")
	flag.Parse()
	if o.BinDir == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *epoch == 0 {
		fmt.Sscan(os.Getenv("SOURCE_DATE_EPOCH"), epoch)
	}
	o.Created = time.Unix(*epoch, 0).UTC()
	if err := Write(*out, *tag, o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s)\n", *out, *tag)
}
