// The Java test app: the JDK's own HTTP server on 127.0.0.1:$PORT. Every request is answered
// with 200 and `java <path>`; a request to /call first sends GET $DOWNSTREAM_URL with the
// JDK's HTTP client (so the agent propagates the trace context, in the configured format).
// It knows nothing of OpenTelemetry: the agent that the injector attaches does it all.
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;

public class App {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(System.getenv("PORT"));
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 16);
        HttpClient client = HttpClient.newHttpClient();
        server.createContext("/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            String body = "java " + path;
            int status = 200;
            if (path.equals("/call")) {
                try {
                    HttpRequest req = HttpRequest.newBuilder(URI.create(System.getenv("DOWNSTREAM_URL"))).build();
                    HttpResponse<String> resp = client.send(req, HttpResponse.BodyHandlers.ofString());
                    body += " downstream " + resp.statusCode();
                } catch (Exception e) {
                    status = 502;
                    body += " downstream failed: " + e;
                }
            }
            byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(status, bytes.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(bytes);
            }
        });
        server.start();
        System.out.println("java app listening on 127.0.0.1:" + port);
    }
}
