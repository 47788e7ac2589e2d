// Command cert-manager runs cert-manager's own controllers and CA injector, taken from the
// github.com/cert-manager/cert-manager Go module, out of cluster against the end-to-end tests'
// API server, and renders the CRDs of that module's Helm chart.
//
// Why a main of our own: cert-manager's binaries live in nested modules (cmd/controller,
// cmd/cainjector) that are not published on the Go module proxy, and the main module's zip
// leaves them out. Every controller, issuer and injector below is cert-manager's code from the
// main module; this file only wires them the way the upstream binaries do (a controller
// ContextFactory, the registered constructors, the shared informers; a controller-runtime
// manager with RegisterAllInjectors), with leader election off (one instance).
//
//	cert-manager controller --kubeconfig FILE [--cluster-resource-namespace NS] [-v N]
//	cert-manager cainjector --kubeconfig FILE [-v N]
//	cert-manager crds CHART_DIR VERSION  # the chart's CRD templates, crds.enabled=true
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/Masterminds/sprig/v3"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	cmscheme "github.com/cert-manager/cert-manager/pkg/api"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	cainjector "github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The controllers the cert-manager mode needs (SelfSigned and CA issuers). Each package
	// registers its constructor with controllerpkg.Register in init().
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The issuer implementations the issuers controller checks (issuer.RegisterIssuer in init()).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers lists, in start order, the cert-manager controllers run by `controller`: the
// Issuer controller, the CertificateRequest approver and signers for SelfSigned and CA
// issuers, and the six Certificate controllers.
var controllers = []string{
	issuers.ControllerName,
	crapprover.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "controller":
		err = runController(os.Args[2:])
	case "cainjector":
		err = runCAInjector(os.Args[2:])
	case "crds":
		if len(os.Args) != 4 {
			usage()
		}
		err = renderCRDs(os.Args[2], os.Args[3], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cert-manager controller|cainjector --kubeconfig FILE [-v N] | cert-manager crds CHART_DIR VERSION")
	os.Exit(2)
}

// commonFlags parses --kubeconfig and -v (klog verbosity) and sets up logging.
func commonFlags(name string, args []string, extra func(*flag.FlagSet)) (string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server (required)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity (klog)")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *kubeconfig == "" {
		return "", errors.New("--kubeconfig is required")
	}
	logf.InitLogs()
	return *kubeconfig, nil
}

// signalContext is cancelled on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runController(args []string) error {
	var clusterResourceNamespace string
	kubeconfig, err := commonFlags("controller", args, func(fs *flag.FlagSet) {
		fs.StringVar(&clusterResourceNamespace, "cluster-resource-namespace", "kube-system",
			"namespace of the Secrets of ClusterIssuers")
	})
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	log := klog.Background().WithName("cert-manager-controller")
	ctx = logf.NewContext(ctx, log)

	// The values are the upstream controller's defaults (ControllerConfiguration v1alpha1).
	opts := controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
		},
		IngressShimOptions: controllerpkg.IngressShimOptions{DefaultIssuerKind: "Issuer", DefaultIssuerGroup: "cert-manager.io"},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	known := controllerpkg.Known()
	var wg sync.WaitGroup
	errs := make(chan error, len(controllers))
	for _, name := range controllers {
		constructor, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		log.Info("starting controller", "controller", name)
		wg.Go(func() {
			if err := c.Run(5, ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	// The constructors asked the shared factories for their informers; start those now.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("controllers started", "count", len(controllers))
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func runCAInjector(args []string) error {
	kubeconfig, err := commonFlags("cainjector", args, nil)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	log := klog.Background().WithName("cert-manager-cainjector")
	ctrl.SetLogger(log)
	ctx = logf.NewContext(ctx, log)

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "cert-manager-cainjector"
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// As upstream: Secrets are read from the API server, their metadata alone is cached.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return err
	}
	log.Info("starting manager")
	return mgr.Start(ctx)
}

// renderCRDs executes the chart's crd-*.yaml templates, with its _helpers.tpl, as `helm
// template --set crds.enabled=true,crds.keep=false` would: Helm's template functions are
// Sprig's plus include, toYaml and required, the ones _helpers.tpl and these templates use. VERSION stands for
// the chart's version and appVersion, which the release process stamps into Chart.yaml.
func renderCRDs(chartDir, version string, out *os.File) error {
	helpers, err := os.ReadFile(filepath.Join(chartDir, "templates", "_helpers.tpl"))
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "crd-*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no templates/crd-*.yaml in %s", chartDir)
	}
	sort.Strings(files)
	chartYAML, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	var chart struct {
		Name string `json:"name"`
	}
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil {
		return err
	}
	values := map[string]any{
		"crds":        map[string]any{"enabled": true, "keep": false},
		"installCRDs": false,
		"creator":     "static",
		"global":      map[string]any{"commonLabels": map[string]any{}},
	}
	data := map[string]any{
		"Values":  values,
		"Chart":   map[string]any{"Name": chart.Name, "Version": version, "AppVersion": version},
		"Release": map[string]any{"Name": "cert-manager", "Namespace": "cert-manager", "Service": "Helm"},
	}
	root := template.New("chart").Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	funcs["include"] = func(name string, d any) (string, error) {
		var b bytes.Buffer
		err := root.ExecuteTemplate(&b, name, d)
		return b.String(), err
	}
	funcs["toYaml"] = func(v any) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	funcs["required"] = func(msg string, v any) (any, error) {
		if v == nil || v == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	root.Funcs(funcs)
	if _, err := root.New("_helpers.tpl").Parse(string(helpers)); err != nil {
		return err
	}
	for i, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		t, err := root.New(filepath.Base(f)).Parse(string(text))
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		doc := strings.TrimSpace(b.String())
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		fmt.Fprintf(out, "# Source: cert-manager/templates/%s\n%s\n", filepath.Base(f), doc)
	}
	return nil
}
