// Stand-in for LocalStack's `ddb-local-loader` Java agent.
//
// LocalStack starts DynamoDB Local with `-javaagent:.../ddb-local-loader-0.1.jar`. The real agent,
// downloaded from GitHub at first use, only patches DynamoDB Local to allow more than 20 GSIs per
// table. Offline we cannot download it, and the JVM refuses to start without the jar, so
// localstack/install.sh builds this agent under that name: it loads and does nothing.
package courier.localstack;

import java.lang.instrument.Instrumentation;

public final class NoopDdbLocalLoader {
    private NoopDdbLocalLoader() {}

    public static void premain(String agentArgs, Instrumentation inst) {
        // Intentionally empty.
    }

    public static void premain(String agentArgs) {
        // Intentionally empty.
    }
}
