package p9

import (
	"bufio"
	"net"
	"path/filepath"
	"strconv"
	"testing"

	"sandfs/vmm/virtio/virtiotest"
)

// echoServer answers every frame on l with a reply of replyLen bytes
// (type+1, same tag).
func echoServer(b *testing.B, l net.Listener, replyLen int) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				f, err := readFrame(br, 1<<24)
				if err != nil {
					return
				}
				h := parseHeader(f)
				if _, err := c.Write(frame(h.typ+1, h.tag, make([]byte, replyLen-headerLen))); err != nil {
					return
				}
			}
		}()
	}
}

// BenchmarkRoundTrip is one request and its reply through the device
// (driver → queue → socket → server → socket → queue → driver), for a
// small reply (a getattr's) and a 500 KiB one (a full read); the bare
// rows are the same frames over the socket alone.
func BenchmarkRoundTrip(b *testing.B) {
	for _, n := range []int{160, 512000} {
		b.Run(sizeName(n)+"/device", func(b *testing.B) {
			sock := filepath.Join(b.TempDir(), "s")
			l, err := net.Listen("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go echoServer(b, l, n)
			mem, irq := virtiotest.NewMem(8<<20), virtiotest.NewIRQ()
			dev, err := New(mem, irq, 5, Config{Tag: "t", Socket: sock})
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Close()
			d := virtiotest.Init(b, dev.Transport(), mem, irq, virtiotest.Options{})
			d.AddKick(0, virtiotest.R(frame(tTversion, noTag, make([]byte, 13))), virtiotest.W(n))
			d.MustWait(0)
			req := frame(tTgetattr, 1, make([]byte, 12))
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				d.AddKick(0, virtiotest.R(req), virtiotest.W(n))
				if u := d.MustWait(0); int(u.Len) != n {
					b.Fatalf("reply %d bytes", u.Len)
				}
			}
		})
		b.Run(sizeName(n)+"/bare", func(b *testing.B) {
			sock := filepath.Join(b.TempDir(), "s")
			l, err := net.Listen("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go echoServer(b, l, n)
			c, err := net.Dial("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReaderSize(c, 64<<10)
			req := frame(tTgetattr, 1, make([]byte, 12))
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				c.Write(req)
				if f, err := readFrame(br, 1<<24); err != nil || len(f) != n {
					b.Fatalf("reply %d bytes, %v", len(f), err)
				}
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
