// Package serve runs an http.Server in the background on an address of the
// configuration, as the webhook ingress and the OpenAI-compatible proxy do.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
)

// A Server is an http.Server serving in the background.
type Server struct {
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
}

// Start listens on addr (on loopback when it names no host) and serves srv
// in the background until Shutdown. It returns the address it listens on
// (useful with port 0). what names the server in the error and in the log
// line of a Serve that ends otherwise than by Shutdown.
func Start(srv *http.Server, addr, what string, log *slog.Logger) (*Server, string, error) {
	ln, err := net.Listen("tcp", ListenAddr(addr))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	s := &Server{srv: srv, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" stopped serving", "err", err)
		}
	}()
	return s, ln.Addr().String(), nil
}

// Shutdown stops taking requests and waits, until ctx is done, for the
// ones in progress to be answered (see http.Server.Shutdown). A nil Server
// has nothing to shut down.
func (s *Server) Shutdown(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// ListenAddr puts a listen address without a host (":8080") on loopback:
// serving every interface must be asked for ("0.0.0.0:8080").
func ListenAddr(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
