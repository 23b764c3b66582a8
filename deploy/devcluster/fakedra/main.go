// fakedra is the dev cluster's fake GPU DRA kubelet plugin for its real (kubelet) nodes, built on
// k8s.io/dynamic-resource-allocation's kubeletplugin helper, under NVIDIA's driver name gpu.nvidia.com.
//
// It publishes one ResourceSlice pool named after its node whose devices are read from -devices, a JSON
// list the dev cluster writes with the same function that builds the kwok nodes' slices, so both kinds of
// node publish one shape. A device's GPU index is its position in that list (gpu-0, gpu-1, ...: the
// operator's index order).
//
// NodePrepareResources writes, per claim, a CDI spec (cdi.go) that gives the container
// NVIDIA_VISIBLE_DEVICES=<indices of the claim's devices> and a read-only file naming them; the container
// runtime applies it. It refuses (the kubelet retries) a device that another prepared claim still holds.
// NodeUnprepareResources deletes what Prepare wrote.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const driverName = "gpu.nvidia.com"

// The kubelet dials the registration socket by path, and a unix socket path has at most 107 bytes; the
// helper's default name (<driver>-reg.sock) pushed a dev cluster's deep kubelet root over that limit.
const registrarSocket = "gpu-reg.sock"

type driver struct {
	node    string
	devices []resourceapi.Device
	claims  *claimFiles
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(claim)
		result[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
		if err != nil {
			klog.ErrorS(err, "prepare", "claim", klog.KObj(claim))
		}
	}
	return result, nil
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var chosen []gpu
	var requests [][]string
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != driverName {
			continue
		}
		if result.Pool != d.node {
			return nil, fmt.Errorf("claim %s/%s: device %s is in pool %s, not this node's %s", claim.Namespace, claim.Name, result.Device, result.Pool, d.node)
		}
		index := d.index(result.Device)
		if index < 0 {
			return nil, fmt.Errorf("claim %s/%s: node %s publishes no device %s", claim.Namespace, claim.Name, d.node, result.Device)
		}
		chosen = append(chosen, gpu{Name: result.Device, Index: index, UUID: uuidOf(d.devices[index])})
		requests = append(requests, []string{result.Request})
	}
	ids, err := d.claims.write(claim.UID, chosen)
	if err != nil {
		return nil, err
	}
	devices := make([]kubeletplugin.Device, len(chosen))
	for i, g := range chosen {
		devices[i] = kubeletplugin.Device{Requests: requests[i], PoolName: d.node, DeviceName: g.Name, CDIDeviceIDs: []string{ids[i]}}
	}
	klog.InfoS("prepared", "claim", klog.KObj(claim), "devices", names(chosen), "cdi", ids)
	return devices, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		result[claim.UID] = d.claims.remove(claim.UID)
		klog.InfoS("unprepared", "claim", claim.String(), "err", result[claim.UID])
	}
	return result, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg) // publishing retries by itself; nothing here is fatal
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported // health comes from device taints, as the operator reads them
}

func (d *driver) index(name string) int {
	for i, device := range d.devices {
		if device.Name == name {
			return i
		}
	}
	return -1
}

func uuidOf(device resourceapi.Device) string {
	if value, ok := device.Attributes["uuid"]; ok && value.StringValue != nil {
		return *value.StringValue
	}
	return ""
}

func main() {
	node := flag.String("node-name", "", "the node this plugin runs on (its pool's name)")
	kubeconfig := flag.String("kubeconfig", "", "credentials to publish ResourceSlices and read claims")
	devicesFile := flag.String("devices", "", "JSON list of the pool's devices (resource.k8s.io/v1 Device)")
	registrarDir := flag.String("registrar-dir", "", "the kubelet's plugins_registry folder (<kubelet root>/plugins_registry)")
	pluginDir := flag.String("plugin-dir", "", "this plugin's folder: its DRA socket and the prepared claims' files")
	cdiDir := flag.String("cdi-dir", "", "where the container runtime reads CDI specs")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*node, *kubeconfig, *devicesFile, *registrarDir, *pluginDir, *cdiDir); err != nil {
		klog.ErrorS(err, "fakedra failed")
		os.Exit(1)
	}
}

func run(node, kubeconfig, devicesFile, registrarDir, pluginDir, cdiDir string) error {
	if node == "" || devicesFile == "" || registrarDir == "" || pluginDir == "" || cdiDir == "" {
		return errors.New("-node-name, -devices, -registrar-dir, -plugin-dir and -cdi-dir are all required")
	}
	raw, err := os.ReadFile(devicesFile)
	if err != nil {
		return err
	}
	var devices []resourceapi.Device
	if err := json.Unmarshal(raw, &devices); err != nil {
		return fmt.Errorf("%s: %w", devicesFile, err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	for _, dir := range []string{registrarDir, pluginDir, cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	claims, err := newClaimFiles(pluginDir, cdiDir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	plugin := &driver{node: node, devices: devices, claims: claims}
	helper, err := kubeletplugin.Start(ctx, plugin,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.RegistrarDirectoryPath(registrarDir),
		kubeletplugin.RegistrarSocketFilename(registrarSocket),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.HealthService(false),
		kubeletplugin.GRPCVerbosity(4),
	)
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: devices}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: pool}}); err != nil {
		return err
	}
	klog.InfoS("publishing", "node", node, "devices", len(devices))
	<-ctx.Done()
	return nil
}
