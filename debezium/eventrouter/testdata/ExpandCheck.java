// ExpandCheck runs Debezium's table.expand.json.payload code path
// (io.debezium.transforms.outbox.JsonSchemaData, as EventRouterDelegate
// calls it) and Kafka Connect's converters on payloads read from stdin, one
// Base64 line each, for walbox's differential test (expand_java_test.go).
// Output per payload, tab-separated: the expansion's outcome (ok, clean:
// failed before a schema was inferred, half: failed after), then Base64 of
// JsonConverter with schemas, JsonConverter without schemas and toString
// (StringConverter), "ERR" where the converter throws.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.json.JsonConverter;

import io.debezium.schema.FieldNameSelector;
import io.debezium.schema.SchemaNameAdjuster;
import io.debezium.transforms.outbox.EventRouterConfigDefinition.JsonPayloadNullFieldBehavior;
import io.debezium.transforms.outbox.JsonSchemaData;

public class ExpandCheck {
    public static void main(String[] args) throws Exception {
        boolean nullAsBytes = args.length > 0 && args[0].equals("optional_bytes");
        JsonSchemaData data = new JsonSchemaData(
                nullAsBytes ? JsonPayloadNullFieldBehavior.OPTIONAL_BYTES : JsonPayloadNullFieldBehavior.IGNORE,
                FieldNameSelector.defaultNonRelationalSelector(SchemaNameAdjuster.NO_OP));
        JsonConverter withSchemas = new JsonConverter();
        withSchemas.configure(Map.of("schemas.enable", "true"), false);
        JsonConverter withoutSchemas = new JsonConverter();
        withoutSchemas.configure(Map.of("schemas.enable", "false"), false);
        // The jsonb column's schema, which the payload keeps when expansion fails cleanly.
        Schema jsonb = SchemaBuilder.string().optional().name("io.debezium.data.Json").version(1).build();
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            String payload = new String(Base64.getDecoder().decode(line), StandardCharsets.UTF_8);
            Schema schema = jsonb;
            Object value = payload;
            String outcome = "ok";
            try {
                if (!(payload.startsWith("{") || payload.startsWith("["))) {
                    throw new Exception("not an object or array");
                }
                JsonNode node = mapper.readTree(payload);
                schema = data.toConnectSchema("payload", node);
                try {
                    value = data.toConnectData(node, schema);
                }
                catch (Exception e) {
                    outcome = "half";
                }
            }
            catch (Exception e) {
                outcome = "clean";
            }
            out.println(outcome + "\t" + convert(withSchemas, schema, value) + "\t"
                    + convert(withoutSchemas, schema, value) + "\t"
                    + b64(value == null ? null : value.toString().getBytes(StandardCharsets.UTF_8)));
        }
    }

    static String convert(JsonConverter c, Schema s, Object v) {
        try {
            return b64(c.fromConnectData("t", s, v));
        }
        catch (Exception e) {
            return "ERR";
        }
    }

    static String b64(byte[] b) {
        return b == null ? "NULL" : Base64.getEncoder().encodeToString(b);
    }
}
