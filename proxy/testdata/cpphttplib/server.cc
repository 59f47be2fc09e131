// A minimal OpenAI-style server on cpp-httplib, the HTTP library under
// llama.cpp's server: a plain answer, or three SSE events when the body
// asks for a stream. TestCppHttplibBackend builds and runs it. It binds
// a port the system picks and prints it on a line of its own.
#include <httplib.h>

#include <cstdio>
#include <string>

int main() {
  httplib::Server svr;
  svr.Post("/v1/chat/completions", [](const httplib::Request &req, httplib::Response &res) {
    if (req.body.find("\"stream\":true") == std::string::npos) {
      res.set_content(
          "{\"id\":\"c\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
          "\"assistant\",\"content\":\"hello\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,"
          "\"completion_tokens\":1,\"total_tokens\":4}}",
          "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink &sink) {
      const std::string events[] = {
          "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"he\"},\"finish_reason\":null}]}\n\n",
          "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"llo\"},\"finish_reason\":\"stop\"}]}\n\n",
          "data: [DONE]\n\n"};
      for (const auto &e : events) sink.write(e.data(), e.size());
      sink.done();
      return true;
    });
  });
  int port = svr.bind_to_any_port("127.0.0.1");
  if (port < 0) return 1;
  std::printf("%d\n", port);
  std::fflush(stdout);
  return svr.listen_after_bind() ? 0 : 1;
}
