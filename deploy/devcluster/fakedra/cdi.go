// The files a prepared claim leaves on the node: a record of its devices, the file the container sees, and
// the CDI spec (https://github.com/cncf-tags/container-device-interface, JSON) that the container runtime
// applies for the CDI device ids the kubelet passes it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdi "tags.cncf.io/container-device-interface/specs-go"
)

const (
	cdiVersion = "0.6.0"
	cdiKind    = "paralleljob.dev/gpu" // <vendor>/<class> of every CDI device this plugin names
	// Where the container finds its GPUs listed, one "<index> <device> <uuid>" line each, in claim order.
	containerFile = "/run/paralleljob/gpus"
)

type gpu struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
}

type claimFiles struct {
	records string // <plugin dir>/claims: <uid>.json (the devices) and <uid>.gpus (mounted in the container)
	cdi     string
}

func newClaimFiles(pluginDir, cdiDir string) (*claimFiles, error) {
	records := filepath.Join(pluginDir, "claims")
	if err := os.MkdirAll(records, 0o755); err != nil {
		return nil, err
	}
	return &claimFiles{records: records, cdi: cdiDir}, nil
}

func (c *claimFiles) specPath(uid types.UID) string {
	return filepath.Join(c.cdi, "paralleljob-fakedra-"+string(uid)+".json")
}

// write records the claim's devices and its CDI spec, and returns the CDI device id of each device. It is
// idempotent (the kubelet may prepare a claim twice) and refuses a device another prepared claim holds.
func (c *claimFiles) write(uid types.UID, gpus []gpu) ([]string, error) {
	held, err := c.held(uid)
	if err != nil {
		return nil, err
	}
	for _, g := range gpus {
		if owner, taken := held[g.Name]; taken {
			return nil, fmt.Errorf("device %s is still prepared for claim %s", g.Name, owner)
		}
	}
	record, err := json.Marshal(gpus)
	if err != nil {
		return nil, err
	}
	var listing strings.Builder
	indices := make([]string, len(gpus))
	for i, g := range gpus {
		fmt.Fprintf(&listing, "%d %s %s\n", g.Index, g.Name, g.UUID)
		indices[i] = strconv.Itoa(g.Index)
	}
	listed := filepath.Join(c.records, string(uid)+".gpus")
	if err := writeAtomically(listed, []byte(listing.String())); err != nil {
		return nil, err
	}
	if err := writeAtomically(filepath.Join(c.records, string(uid)+".json"), record); err != nil {
		return nil, err
	}
	spec, ids := cdiSpec(uid, gpus, strings.Join(indices, ","), listed)
	raw, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	return ids, writeAtomically(c.specPath(uid), raw)
}

// held maps each device of every other prepared claim to that claim's UID.
func (c *claimFiles) held(except types.UID) (map[string]string, error) {
	found, err := filepath.Glob(filepath.Join(c.records, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(found)
	held := map[string]string{}
	for _, path := range found {
		uid := strings.TrimSuffix(filepath.Base(path), ".json")
		if uid == string(except) {
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var gpus []gpu
		if err := json.Unmarshal(raw, &gpus); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, g := range gpus {
			held[g.Name] = uid
		}
	}
	return held, nil
}

// remove deletes the spec first, so the runtime never finds a spec whose mounted file is gone; a claim
// never prepared here is no error (the kubelet may unprepare twice).
func (c *claimFiles) remove(uid types.UID) error {
	for _, path := range []string{
		c.specPath(uid),
		filepath.Join(c.records, string(uid)+".gpus"),
		filepath.Join(c.records, string(uid)+".json"),
	} {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// cdiSpec: the claim-wide edits (the visible devices and the mounted listing) apply once whichever of its
// devices a container gets; each device adds its own UUID variable, since CDI refuses a device without edits.
func cdiSpec(uid types.UID, gpus []gpu, indices, listed string) (*cdi.Spec, []string) {
	spec := &cdi.Spec{
		Version: cdiVersion,
		Kind:    cdiKind,
		ContainerEdits: cdi.ContainerEdits{
			Env: []string{"NVIDIA_VISIBLE_DEVICES=" + indices, "PARALLELJOB_FAKE_GPU_DEVICES=" + strings.Join(names(gpus), ",")},
			Mounts: []*cdi.Mount{
				{HostPath: listed, ContainerPath: containerFile, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}},
			},
		},
	}
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		name := fmt.Sprintf("%s-%s", uid, g.Name)
		env := fmt.Sprintf("PARALLELJOB_FAKE_GPU_%d_UUID=%s", g.Index, g.UUID)
		spec.Devices = append(spec.Devices, cdi.Device{Name: name, ContainerEdits: cdi.ContainerEdits{Env: []string{env}}})
		ids[i] = cdiKind + "=" + name
	}
	return spec, ids
}

func names(gpus []gpu) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.Name
	}
	return out
}

// writeAtomically renames a finished temporary file into place; its name does not end in .json, so the
// runtime's CDI cache (which watches the folder) never reads half a spec.
func writeAtomically(path string, data []byte) error {
	temporary := path + ".partial"
	if err := os.WriteFile(temporary, data, 0o644); err != nil {
		return err
	}
	return os.Rename(temporary, path)
}
