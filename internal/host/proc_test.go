package host

import (
	"strings"
	"testing"
)

func TestProcParsers(t *testing.T) {
	kv := parseKB(strings.NewReader("MemTotal:       24576000 kB\nMemAvailable:    1024 kB\nHugePages_Total:       0\nVmRSS:\t  2048 kB\n"))
	if kv["MemTotal"] != 24576000<<10 || kv["MemAvailable"] != 1024<<10 || kv["VmRSS"] != 2048<<10 {
		t.Errorf("parseKB = %v", kv)
	}
	if _, ok := kv["HugePages_Total"]; ok {
		t.Error("parseKB kept a line without a kB unit")
	}
	l1, l5, l15, err := parseLoadavg("0.52 1.25 3.00 2/345 6789\n")
	if err != nil || l1 != 0.52 || l5 != 1.25 || l15 != 3 {
		t.Errorf("parseLoadavg = %v %v %v %v", l1, l5, l15, err)
	}
	if _, _, _, err := parseLoadavg("garbage"); err == nil {
		t.Error("parseLoadavg accepted garbage")
	}
}
