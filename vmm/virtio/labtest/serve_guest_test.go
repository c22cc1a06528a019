package labtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"
)

// guestServe is the guest of TestSaveRestore: it mounts /dev/vda and
// serves commands on vsock port guestListenPort, one per connection:
//
//	echo\n<data>      echo data until EOF
//	blk <token>\n     write /mnt/tok-<token>, fsync, reply "BLK OK <tok-...,...>\n"
//	rng\n             reply "RNG <hex of 32 bytes of /dev/hwrng>\n"
//	net <marker>\n    send 5 frames carrying marker; reply "NET OK\n"
func guestServe() {
	os.MkdirAll("/mnt", 0o755)
	if err := unix.Mount("/dev/vda", "/mnt", "ext4", 0, ""); err != nil {
		fmt.Printf("VTEST serve FAIL mount: %v\n", err)
	}
	l, err := vsock.Listen(guestListenPort, nil)
	if err != nil {
		fmt.Printf("VTEST serve FAIL listen: %v\n", err)
		select {}
	}
	fmt.Printf("VTEST ready\n")
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Printf("VTEST accept error: %v\n", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go serveOne(c.(*vsock.Conn))
	}
}

func serveOne(c *vsock.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	switch f[0] {
	case "echo":
		io.Copy(c, br)
		c.CloseWrite()
	case "blk":
		p := "/mnt/tok-" + f[1]
		fh, err := os.Create(p)
		if err == nil {
			fh.WriteString(f[1])
			err = fh.Sync()
			fh.Close()
		}
		if err != nil {
			fmt.Fprintf(c, "BLK FAIL %v\n", err)
			return
		}
		unix.Sync()
		m, _ := filepath.Glob("/mnt/tok-*")
		sort.Strings(m)
		var names []string
		for _, x := range m {
			b, _ := os.ReadFile(x)
			names = append(names, filepath.Base(x)+"="+string(b))
		}
		fmt.Fprintf(c, "BLK OK %s\n", strings.Join(names, ","))
	case "rng":
		h, err := os.Open("/dev/hwrng")
		if err != nil {
			fmt.Fprintf(c, "RNG FAIL %v\n", err)
			return
		}
		b := make([]byte, 32)
		_, err = io.ReadFull(h, b)
		h.Close()
		if err != nil {
			fmt.Fprintf(c, "RNG FAIL %v\n", err)
			return
		}
		fmt.Fprintf(c, "RNG %x\n", b)
	case "net":
		if _, err := sendFrames(f[1], 5); err != nil {
			fmt.Fprintf(c, "NET FAIL %v\n", err)
			return
		}
		fmt.Fprintf(c, "NET OK\n")
	}
}
