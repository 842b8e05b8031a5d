package runtime

import "testing"

func TestParsePreflightPolicy(t *testing.T) {
	tests := []struct {
		name, modules, builtins string
		wantNil, wantErr        bool
		wantModules             int
	}{
		{name: "off", wantNil: true},
		{name: "blank entries only", modules: " , ", builtins: ",", wantNil: true},
		{name: "modules and builtins", modules: "socket, ctypes,os.system", builtins: "eval,exec", wantModules: 3},
		{name: "bad module", modules: "socket;rm", wantErr: true},
		{name: "dotted builtin", builtins: "os.system", wantErr: true},
		{name: "leading digit", builtins: "1eval", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePreflightPolicy(tt.modules, tt.builtins)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if (p == nil) != tt.wantNil {
				t.Fatalf("policy = %+v, want nil %v", p, tt.wantNil)
			}
			if p != nil && len(p.DenyModules) != tt.wantModules {
				t.Errorf("modules = %q, want %d", p.DenyModules, tt.wantModules)
			}
		})
	}
}
