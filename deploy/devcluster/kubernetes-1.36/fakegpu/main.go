// fakegpu is the dev cluster's GPU device plugin for its real (kubelet) nodes: it speaks the kubelet's
// device-plugin gRPC API v1beta1 and advertises -count fake GPUs as nvidia.com/gpu, so the kubelet's own
// device manager decides which devices a pod gets. Allocate answers with the chosen device ids in the
// container's environment (NVIDIA_VISIBLE_DEVICES, as NVIDIA's plugin does, and PARALLELJOB_FAKE_GPU_IDS),
// so a test reads what the kubelet really chose from inside the container.
//
// It re-registers whenever the kubelet's registration socket is re-created (a restarted kubelet forgets
// its plugins), which is what makes a stopped and restarted node get its GPUs back.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done() // the fake devices never change health
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		ids := strings.Join(container.DevicesIds, ",")
		log.Printf("allocate %s", ids)
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": ids, "PARALLELJOB_FAKE_GPU_IDS": ids},
		})
	}
	return response, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(pluginDir, endpoint, resource string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
	})
	return err
}

// socketIdentity changes when the kubelet re-creates its registration socket (it does on every start).
func socketIdentity(path string) string {
	info, err := os.Stat(path)
	if err != nil {
		return ""
	}
	stat := info.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d/%d", stat.Ino, info.ModTime().UnixNano())
}

func main() {
	pluginDir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins folder")
	count := flag.Int("count", 8, "how many fake GPUs to advertise")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	flag.Parse()

	devices := make([]*pluginapi.Device, *count)
	for i := range devices {
		devices[i] = &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy}
	}
	endpoint := "paralleljob-fakegpu.sock"
	socket := filepath.Join(*pluginDir, endpoint)
	kubeletSocket := filepath.Join(*pluginDir, "kubelet.sock")
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	registered := ""
	var server *grpc.Server
	for {
		select {
		case <-signals:
			if server != nil {
				server.Stop()
			}
			os.Remove(socket)
			return
		case <-time.After(500 * time.Millisecond):
		}
		current := socketIdentity(kubeletSocket)
		if current == "" || current == registered {
			continue
		}
		// A new kubelet: serve on a fresh socket (the kubelet removes the folder's other sockets on start).
		if server != nil {
			server.Stop()
		}
		os.Remove(socket)
		listener, err := net.Listen("unix", socket)
		if err != nil {
			log.Printf("listen %s: %v", socket, err)
			continue
		}
		server = grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(server, &plugin{devices: devices})
		go server.Serve(listener)
		if err := register(*pluginDir, endpoint, *resource); err != nil {
			log.Printf("register with the kubelet: %v (retrying)", err)
			continue
		}
		registered = current
		log.Printf("registered %d devices of %s with the kubelet", len(devices), *resource)
	}
}
